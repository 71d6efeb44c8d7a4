package intercept

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Action is what a rule does with a request it matches.
type Action uint8

// The actions.
const (
	Allow Action = iota
	Deny
)

func (a Action) String() string {
	switch a {
	case Allow:
		return "allow"
	case Deny:
		return "deny"
	}
	return fmt.Sprintf("unknown(%d)", uint8(a))
}

// Mode says whether a deny is carried out.
type Mode uint8

// The modes.
const (
	// Enforce answers a denied request with 403.
	Enforce Mode = iota
	// Report lets a denied request through and logs the rule that would
	// have denied it (would_deny), to try rules on live traffic first.
	Report
)

func (m Mode) String() string {
	switch m {
	case Enforce:
		return "enforce"
	case Report:
		return "report"
	}
	return fmt.Sprintf("unknown(%d)", uint8(m))
}

// RuleSpec is one L7 rule as written in a policy or a configuration file.
type RuleSpec struct {
	// Action is "allow" or "deny".
	Action string `json:"action" yaml:"action"`
	// Methods are the request methods it matches (upper case); empty or
	// "*" matches every method.
	Methods []string `json:"methods,omitempty" yaml:"methods,omitempty"`
	// Paths are exact paths ("/v1/models") or globs ("/v1/*/files/**": '*'
	// is any run of characters within one segment, '**' any run across
	// segments).
	Paths []string `json:"paths,omitempty" yaml:"paths,omitempty"`
	// PathPrefixes match a path that is the prefix or continues it at a
	// segment boundary: "/v1" matches /v1 and /v1/chat, not /v10.
	PathPrefixes []string `json:"pathPrefixes,omitempty" yaml:"pathPrefixes,omitempty"`
}

// RulesSpec is a destination's L7 rules as written.
type RulesSpec struct {
	// Mode is "enforce" (the default) or "report".
	Mode string `json:"mode,omitempty" yaml:"mode,omitempty"`
	// Default is the action for a request no rule matches: "deny" when
	// any rule allows, else "allow"; written out, it is that.
	Default string `json:"default,omitempty" yaml:"default,omitempty"`
	// Rules are tried in order; the first that matches decides.
	Rules []RuleSpec `json:"rules,omitempty" yaml:"rules,omitempty"`
}

// Bounds of a rule set.
const (
	maxRules    = 256
	maxPatterns = 64 // paths plus prefixes of one rule
	maxPattern  = 1024
)

// Rules are a destination's compiled L7 rules. The zero value allows
// everything. Rules are immutable and safe for concurrent use.
type Rules struct {
	Mode    Mode
	Default Action
	List    []Rule
}

// Rule is one compiled rule.
type Rule struct {
	Action  Action
	Methods []string // nil: any
	Paths   []PathPattern
}

// PathPattern matches a request path.
type PathPattern struct {
	// Text is the pattern as written; Prefix marks a path prefix.
	Text   string
	Prefix bool
	glob   *regexp.Regexp
	globCI *regexp.Regexp // glob, ignoring case
}

// String is the pattern as written, "prefix " before a prefix.
func (p PathPattern) String() string {
	if p.Prefix {
		return "prefix " + p.Text
	}
	return p.Text
}

// Match reports whether path matches the pattern, letter case included.
func (p PathPattern) Match(path string) bool { return p.match(path, false) }

// match is Match; with fold, letters match in either case.
func (p PathPattern) match(path string, fold bool) bool {
	switch {
	case p.Prefix:
		if len(path) < len(p.Text) {
			return false
		}
		if head := path[:len(p.Text)]; head != p.Text && !(fold && strings.EqualFold(head, p.Text)) {
			return false
		}
		return len(path) == len(p.Text) || strings.HasSuffix(p.Text, "/") || path[len(p.Text)] == '/'
	case p.glob != nil && fold:
		return p.globCI.MatchString(path)
	case p.glob != nil:
		return p.glob.MatchString(path)
	case fold:
		return strings.EqualFold(path, p.Text)
	default:
		return path == p.Text
	}
}

// CompileRules checks and compiles a rule set.
func CompileRules(s RulesSpec) (Rules, error) {
	var r Rules
	switch strings.ToLower(s.Mode) {
	case "", "enforce":
		r.Mode = Enforce
	case "report":
		r.Mode = Report
	default:
		return r, fmt.Errorf("mode %q: want enforce or report", s.Mode)
	}
	if len(s.Rules) > maxRules {
		return r, fmt.Errorf("%d rules, more than %d", len(s.Rules), maxRules)
	}
	anyAllow := false
	for i, rs := range s.Rules {
		rule, err := compileRule(rs)
		if err != nil {
			return r, fmt.Errorf("rule %d: %w", i+1, err)
		}
		anyAllow = anyAllow || rule.Action == Allow
		r.List = append(r.List, rule)
	}
	switch strings.ToLower(s.Default) {
	case "":
		if anyAllow {
			r.Default = Deny
		}
	case "allow":
		r.Default = Allow
	case "deny":
		r.Default = Deny
	default:
		return r, fmt.Errorf("default %q: want allow or deny", s.Default)
	}
	return r, nil
}

func compileRule(s RuleSpec) (Rule, error) {
	var r Rule
	switch strings.ToLower(s.Action) {
	case "allow":
		r.Action = Allow
	case "deny":
		r.Action = Deny
	default:
		return r, fmt.Errorf("action %q: want allow or deny", s.Action)
	}
	for _, m := range s.Methods {
		if m == "*" {
			r.Methods = nil
			break
		}
		if !isToken(m) {
			return r, fmt.Errorf("method %q is not an HTTP method", m)
		}
		r.Methods = append(r.Methods, strings.ToUpper(m))
	}
	if len(s.Paths)+len(s.PathPrefixes) > maxPatterns {
		return r, fmt.Errorf("more than %d paths and prefixes", maxPatterns)
	}
	for _, p := range s.Paths {
		pp, err := compilePath(p, false)
		if err != nil {
			return r, err
		}
		r.Paths = append(r.Paths, pp)
	}
	for _, p := range s.PathPrefixes {
		pp, err := compilePath(p, true)
		if err != nil {
			return r, err
		}
		r.Paths = append(r.Paths, pp)
	}
	return r, nil
}

func compilePath(p string, prefix bool) (PathPattern, error) {
	what := "path"
	if prefix {
		what = "path prefix"
	}
	switch {
	case p == "":
		return PathPattern{}, fmt.Errorf("an empty %s", what)
	case len(p) > maxPattern:
		return PathPattern{}, fmt.Errorf("%s longer than %d characters", what, maxPattern)
	case p[0] != '/':
		return PathPattern{}, fmt.Errorf("%s %q must start with '/'", what, p)
	case strings.ContainsAny(p, "?#"):
		return PathPattern{}, fmt.Errorf("%s %q holds '?' or '#': rules match the path, never the query", what, p)
	}
	for i := 0; i < len(p); i++ {
		if p[i] <= ' ' || p[i] >= 0x7f {
			return PathPattern{}, fmt.Errorf("%s %q holds a space or a control character", what, p)
		}
	}
	if n := normalize(p, false); n != p && !strings.Contains(p, "*") {
		return PathPattern{}, fmt.Errorf("%s %q is not in normal form (dot segments or needless percent-encoding); write %q", what, p, n)
	}
	pp := PathPattern{Text: p, Prefix: prefix}
	if prefix {
		if strings.Contains(p, "*") {
			return PathPattern{}, fmt.Errorf("path prefix %q holds '*'; write a glob under paths instead", p)
		}
		return pp, nil
	}
	if strings.Contains(p, "*") {
		if strings.Contains(p, "***") {
			return PathPattern{}, fmt.Errorf("path %q holds '***': use '*' (one segment) or '**' (any)", p)
		}
		var b strings.Builder
		b.WriteString("^")
		for i := 0; i < len(p); i++ {
			switch {
			case strings.HasPrefix(p[i:], "**"):
				b.WriteString(".*")
				i++
			case p[i] == '*':
				b.WriteString("[^/]*")
			default:
				b.WriteString(regexp.QuoteMeta(p[i : i+1]))
			}
		}
		b.WriteString("$")
		pp.glob = regexp.MustCompile(b.String())
		pp.globCI = regexp.MustCompile("(?i)" + b.String())
	}
	return pp, nil
}

func isToken(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// Verdict is the rules' answer for one request.
type Verdict struct {
	// Denied is set when the rules deny the request; Allowed is whether it
	// goes on (a deny in report mode goes on).
	Denied, Allowed bool
	// Rule is the index of the deciding rule; -1 for the default.
	Rule int
	// Path is the form of the request's path the decision was made on;
	// AnyCase is set when the rule matched it only with letter case
	// ignored.
	Path    string
	AnyCase bool
}

// RuleName is how logs and answers name the deciding rule.
func (v Verdict) RuleName() string {
	if v.Rule < 0 {
		return "default"
	}
	return fmt.Sprintf("rule %d", v.Rule+1)
}

// Decide answers for method and path, the path as the request carries it
// (percent-encoded, without the query). The origin may read an encoded path
// differently from how it is written — dot segments, %2F, backslashes,
// ";params", trailing dots, letter case — so the rules judge every reading
// (the path as sent, its normal form, and the form with encoded slashes
// decoded, runs of slashes merged, parameters and trailing dots of segments
// dropped), each once as written and once ignoring letter case, and the
// request is denied if any reading is: what cannot be allowed for certain
// is not allowed. So an allow matches a path in the case it was written in,
// and a deny matches it in any case (an origin may be case-insensitive:
// IIS, Windows file systems, some Spring configurations). The path is
// forwarded unchanged.
func (r *Rules) Decide(method, path string) Verdict {
	if len(r.List) == 0 && r.Default == Allow {
		return Verdict{Allowed: true, Rule: -1, Path: path}
	}
	// A method is read as sent and upper-cased (as Django and Werkzeug
	// read it): "delete" is no way past a rule that denies DELETE.
	methods := []string{method}
	if u := strings.ToUpper(method); u != method {
		methods = append(methods, u)
	}
	var first Verdict
	for j, m := range methods {
		for i, p := range readings(path) {
			for _, fold := range [...]bool{false, true} {
				v := r.decide(m, p, fold)
				if i == 0 && j == 0 && !fold {
					first = v
				}
				if v.Denied {
					v.Allowed = r.Mode == Report
					return v
				}
			}
		}
	}
	first.Allowed = true
	return first
}

func (r *Rules) decide(method, path string, fold bool) Verdict {
	for i, rule := range r.List {
		if rule.matches(method, path, fold) {
			return Verdict{Denied: rule.Action == Deny, Rule: i, Path: path, AnyCase: fold && !rule.matches(method, path, false)}
		}
	}
	return Verdict{Denied: r.Default == Deny, Rule: -1, Path: path}
}

func (r Rule) matches(method, path string, fold bool) bool {
	if r.Methods != nil && !slices.Contains(r.Methods, method) {
		return false
	}
	if len(r.Paths) == 0 {
		return true
	}
	for _, p := range r.Paths {
		if p.match(path, fold) {
			return true
		}
	}
	return false
}

// readings are the forms of path an origin may act on, path itself first.
func readings(path string) []string {
	out := []string{path}
	if n := normalize(path, false); n != path {
		out = append(out, n)
	}
	if n := normalize(path, true); !slices.Contains(out, n) {
		out = append(out, n)
	}
	return out
}

// normalize returns path with percent-encoded unreserved characters decoded,
// the hex of other escapes in upper case, a '%' that starts no escape
// encoded, and dot segments removed (RFC 3986
// 6.2.2). With loose, it also reads the path as a lenient server would:
// %2F, %5C and '\' as '/', runs of '/' as one, ";params" of a segment gone,
// and a segment's trailing dots (Windows and IIS drop them: "admin." is
// "admin").
func normalize(path string, loose bool) string {
	if path == "" || path[0] != '/' {
		return path
	}
	var b strings.Builder
	b.Grow(len(path))
	for i := 0; i < len(path); i++ {
		c := path[i]
		if c == '%' && i+2 < len(path) && ishex(path[i+1]) && ishex(path[i+2]) {
			d := unhex(path[i+1])<<4 | unhex(path[i+2])
			switch {
			case isUnreserved(d):
				b.WriteByte(d)
			case loose && (d == '/' || d == '\\'):
				b.WriteByte('/')
			default:
				b.WriteByte('%')
				b.WriteByte(upperHex(path[i+1]))
				b.WriteByte(upperHex(path[i+2]))
			}
			i += 2
			continue
		}
		if c == '%' {
			// Not an escape: as a server that reads it at all does, a
			// literal '%', which is %25.
			b.WriteString("%25")
			continue
		}
		if loose && c == '\\' {
			c = '/'
		}
		b.WriteByte(c)
	}
	p := b.String()
	if loose {
		segs := strings.Split(p, "/")
		kept := segs[:1]
		for j, s := range segs[1:] {
			if k := strings.IndexByte(s, ';'); k >= 0 {
				s = s[:k]
			}
			if t := strings.TrimRight(s, "."); t != "" {
				s = t // "admin." and "admin..", never a dot segment
			}
			if s == "" && j != len(segs)-2 {
				continue // an empty segment inside: a run of slashes
			}
			kept = append(kept, s)
		}
		p = strings.Join(kept, "/")
		if p == "" {
			p = "/"
		}
	}
	return removeDots(p)
}

// removeDots is RFC 3986 5.2.4 for an absolute path.
func removeDots(p string) string {
	if !strings.Contains(p, ".") {
		return p
	}
	segs := strings.Split(p[1:], "/")
	out := make([]string, 0, len(segs))
	for i, s := range segs {
		last := i == len(segs)-1
		switch s {
		case ".":
			if last {
				out = append(out, "")
			}
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
			if last {
				out = append(out, "")
			}
		default:
			out = append(out, s)
		}
	}
	return "/" + strings.Join(out, "/")
}

func isUnreserved(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

func ishex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

func upperHex(c byte) byte {
	if c >= 'a' && c <= 'f' {
		return c - 'a' + 'A'
	}
	return c
}
