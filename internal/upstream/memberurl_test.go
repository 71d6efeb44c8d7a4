package upstream

import (
	"net/url"
	"strings"
	"testing"
)

// secretLetters appear in the test passwords and nowhere else: not in the
// user, host, attributes or any error text, so one of them in an error or
// a member's name is a piece of the password.
const secretLetters = "QZJKWY"

// Issue 11: a malformed upstream URL's error never prints any part of its
// password, whichever character makes it malformed and wherever the URL is
// written (a URL, a member spec, a member file line).
func TestMemberErrorsHoldNoPassword(t *testing.T) {
	for _, tt := range []struct {
		name, pw, want string // want: what the error says is wrong
	}{
		{"space", "QZJ KWY", "percent-encode"},
		{"two-spaces", "QZ J KWY", "percent-encode"},
		{"tab", "QZJ\tKWY", "percent-encode"},
		{"nbsp", "QZJ\u00a0KWY", "percent-encode"},
		{"newline", "QZJ\nKWY", ""},
		{"percent", "QZJ%KWY", "%25"},
		{"percent-at-end", "QZJKWY%", "%25"},
		{"percent-one-hex", "QZJKWY%4", "%25"},
		{"slash", "QZJ/KWY", "percent-encode"},
		{"hash", "QZJ#KWY", "percent-encode"},
		{"question", "QZJ?KWY", "percent-encode"},
		{"unicode", "QZJ\u00e9KWY", "percent-encode"},
		{"emoji", "QZJ\U0001F511KWY", "percent-encode"},
		{"scheme-like", "QZJ://KWY", "percent-encode"},
		{"brackets", "QZJ[KWY]", "percent-encode"},
		{"backslash", "QZJ\\KWY", "percent-encode"},
		{"quote", "QZJ\"KWY", "percent-encode"},
		{"space-hash", "QZJ #KWY", ""},
		{"space-hash-space", "QZJ # KWY", ""},
	} {
		raw := "http://u:" + tt.pw + "@proxy.corp:3128"
		for _, c := range []struct {
			how   string
			parse func() error
			where string
		}{
			{"url", func() error { _, err := ParseMemberURL(raw); return err }, "proxy"},
			{"no-scheme", func() error { _, err := ParseMemberURL(strings.TrimPrefix(raw, "http://")); return err }, "proxy"},
			{"spec", func() error { _, err := ParseMemberSpec(raw + " weight=2 backup"); return err }, "proxy"},
			{"list", func() error { _, err := ParseMemberList("http://a:1\n" + raw + " backup # spare\n"); return err }, "line 2"},
		} {
			t.Run(tt.name+"/"+c.how, func(t *testing.T) {
				err := c.parse()
				if err == nil {
					t.Fatalf("%q parsed", raw)
				}
				if strings.ContainsAny(err.Error(), secretLetters) {
					t.Fatalf("error holds part of the password: %v", err)
				}
				if !strings.Contains(err.Error(), c.where) {
					t.Errorf("error does not say where: %v", err)
				}
				if c.how == "list" && strings.ContainsAny(tt.pw, "\n#") {
					return // cut in two lines or at a comment: the first part is what is wrong
				}
				if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "proxy.corp") && !strings.Contains(tt.pw, "\n") {
					t.Errorf("error does not say what is wrong (%q) or where: %v", tt.want, err)
				}
			})
		}
		// Percent-encoded, the same password works.
		enc := "http://" + url.UserPassword("u", tt.pw).String() + "@proxy.corp:3128"
		m, err := ParseMemberSpec(enc + " weight=2")
		if err != nil {
			t.Errorf("%s: encoded %q: %v", tt.name, enc, err)
		} else if got := m.Password; got != tt.pw {
			t.Errorf("%s: encoded %q: password %q", tt.name, enc, got)
		}
	}
}

// Passwords whose characters a URL may carry as they are parse as written.
func TestMemberPasswordsAsWritten(t *testing.T) {
	for raw, pw := range map[string]string{
		"http://u:p@ss@proxy:1":        "p@ss", // url.Parse splits at the last '@'
		"http://u:a,b;c=d@proxy:1":     "a,b;c=d",
		"http://u:p%20w%23%2F%3F@px:1": "p w#/?",
		"http://u:%C3%A9@px:1":         "é",
		"http://u:a:b@px:1":            "a:b",
	} {
		m, err := ParseMemberURL(raw)
		if err != nil {
			t.Errorf("%s: %v", raw, err)
			continue
		}
		if got := m.Password; got != pw {
			t.Errorf("%s: password %q, want %q", raw, got, pw)
		}
	}
}

func TestMemberErrorText(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"http://u:QZ@proxy:31a8", "upstream proxy http://u:xxxxx@proxy:31a8: the port is not a number"},
		{"http://proxy:31a8", "upstream proxy http://proxy:xxxxx: the port is not a number"},
		{"http://u:QZ", "upstream proxy http://u:xxxxx: the port is not a number"}, // a password cut short
		{"http://[::1:31a8", "upstream proxy http://[:xxxxx: an IPv6 address needs its closing ']'"},
		{"http://[::1]:QZ", "upstream proxy http://[::1]:xxxxx: the port is not a number"},
		{"http://u:QZ J@proxy:1", "upstream proxy http://u:xxxxx@proxy:1: the password has characters a URL cannot carry"},
		{"http://Q Z:pw@proxy:1", "upstream proxy http://Q Z:xxxxx@proxy:1: the user name has characters"},
		{"http://QZJ@proxy:1/x", "upstream proxy http://xxxxx@proxy:1: a proxy URL has no path"},
		{"http://proxy:1/?token=QZJ", "upstream proxy http://proxy:1: a proxy URL has no path"},
		{"http://u:50%QZ@proxy:1", "upstream proxy http://u:xxxxx@proxy:1: the password has a '%' that does not start"},
		{"ftp://u:QZ@proxy", "upstream proxy ftp://u:xxxxx@proxy: unsupported scheme"},
		{"http://u:QZ@", "upstream proxy http://u:xxxxx@: no host"},
		{"http://u:QZ@proxy:99999", "upstream proxy http://u:xxxxx@proxy:99999: bad port"},
		{"http://pro xy:1", "upstream proxy http://pro xy:xxxxx: the host has a space"},
	} {
		_, err := ParseMemberURL(tt.in)
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("ParseMemberURL(%q) = %v, want %q...", tt.in, err, tt.want)
		}
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"http://u:QZ@proxy:1":    "http://u:xxxxx@proxy:1",
		"http://QZJ@proxy:1":     "http://xxxxx@proxy:1", // a lone user name may be a token
		"u:QZ://J@proxy":         "u:xxxxx@proxy",        // "://" in the password is no scheme
		"http://u:Q@Z@proxy":     "http://u:xxxxx@proxy",
		"http://proxy:3128":      "http://proxy:3128",
		"QZJ@proxy:3128":         "xxxxx@proxy:3128",
		"socks5h://u:Q Z@p:1080": "socks5h://u:xxxxx@p:1080",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestMemberListComments(t *testing.T) {
	ms, err := ParseMemberList("# pool\n  # indented\nhttp://u:p#w@a:1 weight=2 # the '#' in the password is not one\n\thttp://b:1\t# tab\n")
	if err == nil {
		t.Fatalf("an unencoded '#' in a password was accepted: %s", specNames(ms))
	}
	ms, err = ParseMemberList("# pool\n  # indented\nhttp://u:p%23w@a:1 weight=2 # spare\n\thttp://b:1\t# tab\n# ask ops@corp\n")
	if err != nil || specNames(ms) != "a:1,b:1" || ms[0].Password != "p#w" {
		t.Fatalf("got %s, %v", specNames(ms), err)
	}
	// " #" in a password, or a comment with an e-mail address? Refused
	// either way, without quoting the line.
	for _, l := range []string{"http://u:1234 #QZ@proxy:1", "http://u: Y #@proxy.corp:3128", "http://proxy:1 # QZ@corp", "http://u:@Y #@proxy:1", "http://u:p@proxy:1 # QZ@corp"} {
		_, err := ParseMemberList("http://a:1\n" + l + "\n")
		if err == nil || !strings.Contains(err.Error(), "line 2: a comment") || strings.ContainsAny(err.Error(), secretLetters) {
			t.Errorf("%q: %v", l, err)
		}
	}
	// An unknown attribute is not quoted: it may be a piece of a password.
	if _, err := ParseMemberSpec("http://u:80 QZ"); err == nil || !strings.Contains(err.Error(), "unknown attribute 1") || strings.ContainsAny(err.Error(), secretLetters) {
		t.Errorf("unknown attribute: %v", err)
	}
}

// FuzzMemberSecret builds member lines around any password (drawn from the
// letters only passwords use and the characters URLs trip on) and checks
// that no error and no member name holds a letter of it.
func FuzzMemberSecret(f *testing.F) {
	for _, s := range []string{"Q Z", "Q%Z", "Q@Z", "Q/Z", "Q#Z", "Q?Z", "Qé", "Q://Z", "Q #Z", "Q\nZ", "QZ,JK", "Q\u00a0Z", "Q:Z"} {
		f.Add(s, uint8(0))
	}
	f.Fuzz(func(t *testing.T, pw string, how uint8) {
		if !strings.ContainsAny(pw, secretLetters) {
			return
		}
		for _, r := range pw {
			if r < 0x80 && !strings.ContainsRune(secretLetters+"79 \t\n%@/#?:,;=+&$!*'()~.-_[]\\\"", r) {
				return // keep the password's letters its own
			}
		}
		raw := "http://u:" + pw + "@proxy.corp:3128"
		var name string
		var err error
		switch how % 3 {
		case 0:
			var m MemberSpec
			if m, err = ParseMemberURL(raw); err == nil {
				name = m.Name()
			}
		case 1:
			var m MemberSpec
			if m, err = ParseMemberSpec(raw + " weight=2"); err == nil {
				name = m.Name()
			}
		default:
			if strings.Contains(pw, "\n") {
				return // a member file is lines: each is a member of its own
			}
			var ms []MemberSpec
			if ms, err = ParseMemberList(raw + " backup # spare\n"); err == nil {
				name = specNames(ms)
			}
		}
		if err != nil && strings.ContainsAny(err.Error(), secretLetters) {
			t.Fatalf("%q: error holds part of the password: %v", raw, err)
		}
		if strings.ContainsAny(name, secretLetters) {
			t.Fatalf("%q: member name holds part of the password: %s", raw, name)
		}
	})
}
