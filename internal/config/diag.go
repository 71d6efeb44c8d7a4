package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"

	"egret.io/egret/internal/suggest"
)

// Problem is one thing wrong in the configuration file, where it is: the
// line and column of the value (or of the unknown key), the key path
// ("limits.max_tunnels", "routes[2].action") and what was expected.
type Problem struct {
	File         string // "" when the file has no name (ParseFile)
	Line, Column int    // 1-based; 0 when unknown
	Path         string // "" for the document as a whole
	Msg          string
}

func (p Problem) Error() string {
	var b strings.Builder
	if p.File != "" {
		b.WriteString(p.File + ":")
	} else if p.Line > 0 {
		b.WriteString("line ")
	}
	if p.Line > 0 {
		fmt.Fprintf(&b, "%d:%d:", p.Line, p.Column)
	}
	if b.Len() > 0 {
		b.WriteByte(' ')
	}
	if p.Path != "" {
		b.WriteString(p.Path + ": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// Problems are every problem found in a file, in file order; Error writes
// one per line.
type Problems []Problem

func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.Error()
	}
	return strings.Join(lines, "\n")
}

// positions maps key paths to where their values are in the file.
type positions map[string][2]int

// keyError is an error about the value of one key of the file; Load gives
// it the key's file:line.
type keyError struct {
	path string
	err  error
}

func (e *keyError) Error() string { return e.err.Error() }
func (e *keyError) Unwrap() error { return e.err }

// atKey marks err as being about the file's key path.
func atKey(path string, err error) error { return &keyError{path: path, err: err} }

// at is atKey unless the environment or a flag set envKey, which then is
// where the value came from.
func (l *loader) at(path, envKey string, err error) error {
	if _, ok := l.get(envKey); ok && envKey != "" {
		return err
	}
	return atKey(path, err)
}

// locate turns the key errors in err (one or an errors.Join of them) into
// Problems at their key's file:line, and appends them to the parse
// problems, in file order. Errors without a key stay as they are, after.
func locate(err error, parse Problems, file string, pos positions) error {
	var list []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		list = j.Unwrap()
	} else if err != nil {
		list = []error{err}
	}
	probs := append(Problems(nil), parse...)
	reported := map[string]bool{}
	for _, p := range parse {
		reported[p.Path] = true
	}
	var rest []error
	for _, e := range list {
		var ke *keyError
		if !errors.As(e, &ke) {
			if len(parse) == 0 {
				rest = append(rest, e)
			}
			continue
		}
		if _, present := pos[ke.path]; reported[ke.path] || !present && reportedBeside(reported, ke.path) {
			continue // a consequence of a problem already reported
		}
		p := Problem{File: file, Path: ke.path, Msg: ke.err.Error()}
		// A key that is missing is at its parent's place.
		for k := ke.path; k != ""; k = parent(k) {
			if at, ok := pos[k]; ok {
				p.Line, p.Column = at[0], at[1]
				break
			}
		}
		probs = append(probs, p)
	}
	sort.SliceStable(probs, func(i, j int) bool { return probs[i].Line < probs[j].Line })
	var out []error
	if len(probs) > 0 {
		out = append(out, probs)
	}
	return errors.Join(append(out, rest...)...)
}

// parent is the path of the key holding path ("routes[1]" for
// "routes[1].action", "" at the top).
func parent(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}

// reportedBeside reports whether a parse problem concerns a sibling key:
// an unknown "acton" explains a missing "action".
func reportedBeside(reported map[string]bool, path string) bool {
	if p := parent(path); p != "" {
		for r := range reported {
			if parent(r) == p {
				return true
			}
		}
	}
	return false
}

// parseFile decodes data, reporting every unknown key (with a did-you-mean)
// and every value of the wrong type at once, with its line and key path.
func parseFile(name string, data []byte) (*File, positions, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, nil, Problems{syntaxProblem(name, err)}
	}
	w := &walker{file: name, pos: positions{}}
	if len(doc.Content) > 0 {
		w.walk(doc.Content[0], reflect.TypeOf(File{}), "")
	}
	if len(w.probs) > 0 {
		// Decode what can be (the decoder skips values of the wrong type
		// and unknown keys) so that Load can report the meaning errors of
		// the rest in the same run.
		f := &File{}
		_ = yamlLenient(data, f)
		return f, w.pos, Problems(w.probs)
	}
	f := &File{}
	if err := yamlStrict(data, f); err != nil {
		// The walk accepts what the decoder refuses only in corners
		// (custom decoders): still say where.
		return nil, w.pos, Problems{decodeProblem(name, err, w.pos)}
	}
	if f.Version != 0 && f.Version != 1 {
		at := w.pos["version"]
		return nil, w.pos, Problems{{File: name, Line: at[0], Column: at[1], Path: "version", Msg: fmt.Sprintf("version %d is not supported (want 1)", f.Version)}}
	}
	return f, w.pos, nil
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func syntaxProblem(name string, err error) Problem {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		n, _ := strconv.Atoi(m[1])
		return Problem{File: name, Line: n, Column: 1, Msg: "not valid YAML: " + m[2]}
	}
	return Problem{File: name, Msg: "not valid YAML: " + strings.TrimPrefix(msg, "yaml: ")}
}

var goField = regexp.MustCompile(`Go struct field \w+\.(\S+) of type (\S+)`)

// decodeProblem turns a decoder error into the key path it names, when it
// names one.
func decodeProblem(name string, err error, pos positions) Problem {
	msg := strings.TrimPrefix(err.Error(), "error unmarshaling JSON: while decoding JSON: ")
	msg = strings.TrimPrefix(msg, "json: ")
	if m := goField.FindStringSubmatch(msg); m != nil {
		at := pos[m[1]]
		return Problem{File: name, Line: at[0], Column: at[1], Path: m[1], Msg: "want " + goTypeWords(m[2])}
	}
	return Problem{File: name, Msg: msg}
}

func goTypeWords(t string) string {
	switch {
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"):
		return "an integer"
	case strings.HasPrefix(t, "float"):
		return "a number"
	case t == "bool":
		return "true or false"
	case t == "string":
		return "a string"
	}
	return "a " + t
}

type walker struct {
	file  string
	pos   positions
	probs []Problem
}

func (w *walker) bad(n *yaml.Node, path, format string, args ...any) {
	w.probs = append(w.probs, Problem{File: w.file, Line: n.Line, Column: n.Column, Path: path, Msg: fmt.Sprintf(format, args...)})
}

var unmarshaler = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()

// walk checks n against the Go type t that the decoder fills.
func (w *walker) walk(n *yaml.Node, t reflect.Type, path string) {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if path != "" {
		w.pos[path] = [2]int{n.Line, n.Column}
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.ScalarNode && reflect.PointerTo(t).Implements(unmarshaler) && t.Kind() == reflect.Struct {
		return // a string form (a pool member "URL weight=2"): its decoder checks it
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			w.bad(n, path, "want a mapping (key: value lines), got %s", describe(n))
			return
		}
		fields := jsonFields(t)
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			kp := join(path, k.Value)
			if line, dup := seen[k.Value]; dup {
				w.bad(k, kp, "given twice (first on line %d)", line)
				continue
			}
			seen[k.Value] = k.Line
			ft, ok := fields[k.Value]
			if !ok {
				names := make([]string, 0, len(fields))
				for f := range fields {
					names = append(names, f)
				}
				msg := fmt.Sprintf("unknown key %q", k.Value)
				if s, ok := suggest.Closest(k.Value, names); ok {
					msg += fmt.Sprintf("; did you mean %q?", s)
				} else {
					sort.Strings(names)
					msg += " (known here: " + strings.Join(names, ", ") + ")"
				}
				w.bad(k, kp, "%s", msg)
				continue
			}
			w.walk(v, ft, kp)
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			w.bad(n, path, "want a mapping (name: value lines), got %s", describe(n))
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			w.walk(n.Content[i+1], t.Elem(), join(path, n.Content[i].Value))
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			w.bad(n, path, "want a list (- item lines or [a, b]), got %s", describe(n))
			return
		}
		for i, e := range n.Content {
			w.walk(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
		}
	case reflect.String:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
			hint := ""
			if n.Kind == yaml.ScalarNode {
				hint = fmt.Sprintf(" (quote it: %q)", n.Value)
			}
			w.bad(n, path, "want a string, got %s%s", describe(n), hint)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
			w.bad(n, path, "want an integer, got %s", describe(n))
		}
	case reflect.Float32, reflect.Float64:
		if n.Kind != yaml.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!float") {
			w.bad(n, path, "want a number, got %s", describe(n))
		}
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
			w.bad(n, path, "want true or false, got %s", describe(n))
		}
	}
}

// describe names what a node holds, for "want X, got Y".
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	v := n.Value
	if len(v) > 40 {
		v = v[:37] + "..."
	}
	switch n.Tag {
	case "!!int":
		return "the integer " + v
	case "!!float":
		return "the number " + v
	case "!!bool":
		return v + " (true/false)"
	case "!!str":
		return fmt.Sprintf("the string %q", v)
	}
	return fmt.Sprintf("%q", v)
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// jsonFields maps the JSON names of t's fields (embedded structs'
// promoted) to their types, as encoding/json reads them.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}
