package upstream

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"egret.io/egret/internal/proxystatus"
)

func members(t testing.TB, specs ...string) []*Member {
	t.Helper()
	var out []*Member
	for _, s := range specs {
		m, err := ParseMemberSpec(s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, NewMember(m))
	}
	return out
}

func specNames(ms []MemberSpec) string {
	var s []string
	for _, m := range ms {
		s = append(s, strings.TrimPrefix(m.Name(), "http://"))
	}
	return strings.Join(s, ",")
}

func names(ms []*Member) string {
	var s []string
	for _, m := range ms {
		s = append(s, strings.TrimPrefix(m.Name, "http://"))
	}
	return strings.Join(s, ",")
}

func TestParseMemberSpec(t *testing.T) {
	tests := []struct {
		name, in     string
		wantName     string
		weight       int
		backup, auth bool
		wantErr      string
	}{
		{"plain", "http://a:3128", "http://a:3128", 1, false, false, ""},
		{"no-scheme", "a:3128", "http://a:3128", 1, false, false, ""},
		{"default-ports", "https://a", "https://a:443", 1, false, false, ""},
		{"socks5h", "socks5h://u:p@a", "socks5://a:1080", 1, false, true, ""},
		{"weight", "http://a:1 weight=5", "http://a:1", 5, false, false, ""},
		{"backup", "http://a:1 backup", "http://a:1", 1, true, false, ""},
		{"both", "http://u:p%40ss@a:1  weight=2 BACKUP", "http://a:1", 2, true, true, ""},
		{"ipv6", "http://[::1]:3128", "http://[::1]:3128", 1, false, false, ""},
		{"bad-weight", "http://a:1 weight=0", "", 0, false, false, "weight"},
		{"huge-weight", "http://a:1 weight=1000", "", 0, false, false, "weight"},
		{"unknown-attr", "http://a:1 fast", "", 0, false, false, "unknown attribute"},
		{"bad-scheme", "ftp://a", "", 0, false, false, "unsupported scheme"},
		{"path", "http://a:1/x", "", 0, false, false, "no path"},
		{"bad-port", "http://a:99999", "", 0, false, false, "port"},
		{"empty", "  ", "", 0, false, false, "empty"},
		{"secret-not-in-error", "ftp://u:hunter2@a", "", 0, false, false, "xxxxx"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := ParseMemberSpec(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "hunter2") {
					t.Errorf("error holds the password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.Name() != tt.wantName || m.Weight != tt.weight || m.Backup != tt.backup || m.OwnAuth != tt.auth {
				t.Errorf("got %s weight %d backup %v auth %v", m.Name(), m.Weight, m.Backup, m.OwnAuth)
			}
		})
	}
	m, _ := ParseMemberSpec("http://u:p%40ss@a:1")
	if c := NewMember(m).Credential(); c.Password != "p@ss" {
		t.Errorf("percent-encoded password decoded to %q", c.Password)
	}
}

func TestParseMemberList(t *testing.T) {
	ms, err := ParseMemberList("# pool\nhttp://a:1 weight=2\n\n  http://b:1 backup # spare\n")
	if err != nil || specNames(ms) != "a:1,b:1" || ms[0].Weight != 2 || !ms[1].Backup {
		t.Fatalf("got %s, %v", specNames(ms), err)
	}
	_, err = ParseMemberList("http://a:1\nhttp://u:secret@b:1 weight=x\n")
	if err == nil || !strings.Contains(err.Error(), "line 2") || strings.Contains(err.Error(), "secret") {
		t.Fatalf("err = %v", err)
	}
}

func FuzzParseMemberSpec(f *testing.F) {
	for _, s := range []string{"http://a:3128", "http://u:p%40ss@a:1 weight=2 backup", "socks5h://[::1]", "x weight=", "https://u:pw@h", "http://a auth=ntlm", "http://a auth=negotiate spn=HTTP/b.corp", "socks5://a auth=negotiate", "http://a spn=x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseMemberSpec(s)
		if err != nil {
			if u, p, ok := strings.Cut(s, ":"); ok && len(p) > 8 && strings.Contains(s, "@") {
				_ = u // a password-like part must not come back whole
				pw := p[strings.Index(p, "//")+2:]
				if at := strings.LastIndexByte(pw, '@'); at > 0 {
					if c := strings.IndexByte(pw[:at], ':'); c >= 0 && at-c > 6 && strings.Contains(err.Error(), pw[c+1:at]) && !strings.Contains(pw[at:], pw[c+1:at]) {
						t.Fatalf("error holds the password: %v", err)
					}
				}
			}
			return
		}
		if m.Weight < 1 || m.Weight > MaxWeight || m.URL.User != nil || strings.Contains(m.Name(), "@") {
			t.Fatalf("bad member %+v", m.Name())
		}
	})
}

func TestRoundRobinWeighted(t *testing.T) {
	p := &Pool{Name: "p", Members: members(t, "http://a:1 weight=3", "http://b:1", "http://c:1 backup")}
	counts := map[string]int{}
	var seq []string
	for i := 0; i < 8; i++ {
		c := p.Candidates("x")
		if len(c) != 3 || c[2].Name != "http://c:1" {
			t.Fatalf("candidates %s: want both primaries then the backup", names(c))
		}
		counts[c[0].Name]++
		seq = append(seq, names(c[:1]))
	}
	if counts["http://a:1"] != 6 || counts["http://b:1"] != 2 {
		t.Errorf("first picks %v, want a 6 and b 2 (weights 3:1)", counts)
	}
	// Smooth: b is not starved for three picks in a row twice.
	if strings.Join(seq, " ") != "a:1 a:1 b:1 a:1 a:1 a:1 b:1 a:1" && strings.Count(strings.Join(seq[:4], " "), "b:1") != 1 {
		t.Errorf("order %v is not interleaved", seq)
	}
}

func TestRandomWeighted(t *testing.T) {
	p := &Pool{Name: "p", Policy: Random, Members: members(t, "http://a:1 weight=4", "http://b:1")}
	counts := map[string]int{}
	for i := 0; i < 5000; i++ {
		counts[p.Candidates("x")[0].Name]++
	}
	if a := counts["http://a:1"]; a < 3700 || a > 4300 {
		t.Errorf("a picked %d of 5000, want about 4000", a)
	}
}

func TestLeastConn(t *testing.T) {
	p := &Pool{Name: "p", Policy: LeastConn, Members: members(t, "http://a:1", "http://b:1 weight=2", "http://c:1")}
	ms := p.Current()
	rel := []func(){ms[0].Acquire(), ms[0].Acquire(), ms[1].Acquire(), ms[1].Acquire(), ms[1].Acquire(), ms[2].Acquire()}
	// Loads per weight: a 2, b 1.5, c 1.
	if got := names(p.Candidates("x")); got != "c:1,b:1,a:1" {
		t.Errorf("order %s, want c,b,a", got)
	}
	for _, r := range rel {
		r()
		r() // releasing twice is harmless
	}
	if ms[0].Active() != 0 || ms[1].Active() != 0 {
		t.Fatal("release did not count down")
	}
	firsts := map[string]bool{}
	for i := 0; i < 6; i++ {
		firsts[p.Candidates("x")[0].Name] = true
	}
	if len(firsts) != 3 {
		t.Errorf("idle members do not take turns: %v", firsts)
	}
}

func TestSticky(t *testing.T) {
	p := &Pool{Name: "p", Policy: Sticky, Members: members(t, "http://a:1", "http://b:1", "http://c:1", "http://d:1")}
	hosts := make([]string, 400)
	before := map[string]string{}
	perMember := map[string]int{}
	for i := range hosts {
		hosts[i] = fmt.Sprintf("partner-%d.example", i)
		first := p.Candidates(hosts[i])[0].Name
		if again := p.Candidates(hosts[i])[0].Name; again != first {
			t.Fatalf("%s went to %s then %s", hosts[i], first, again)
		}
		before[hosts[i]] = first
		perMember[first]++
	}
	for m, n := range perMember {
		if n < 60 {
			t.Errorf("member %s got only %d of 400 destinations", m, n)
		}
	}
	// Take b down: only b's destinations move; the others stay.
	b := p.Current()[1]
	b.MarkDown(time.Now(), Backoff{}, "test")
	for _, h := range hosts {
		now := p.Candidates(h)[0].Name
		if before[h] != b.Name && now != before[h] {
			t.Fatalf("%s moved from %s to %s although its member is healthy", h, before[h], now)
		}
		if now == b.Name {
			t.Fatalf("%s still goes to the down member", h)
		}
	}
	// b recovers: its destinations come back.
	b.MarkUp(time.Now())
	for _, h := range hosts {
		if p.Candidates(h)[0].Name != before[h] {
			t.Fatalf("%s did not return to %s", h, before[h])
		}
	}
	// Stable across processes: the order depends only on names.
	q := &Pool{Name: "q", Policy: Sticky, Members: members(t, "http://a:1", "http://b:1", "http://c:1", "http://d:1")}
	for _, h := range hosts[:20] {
		if q.Candidates(h)[0].Name != before[h] {
			t.Fatalf("another pool with the same members sends %s elsewhere", h)
		}
	}
}

func TestHealthAndBackups(t *testing.T) {
	now := time.Unix(1000, 0)
	p := &Pool{Name: "p", Members: members(t, "http://a:1", "http://b:1", "http://c:1 backup"), Now: func() time.Time { return now },
		Backoff: Backoff{Initial: time.Second, Max: 8 * time.Second}}
	a, b, c := p.Current()[0], p.Current()[1], p.Current()[2]
	var backoffs []time.Duration
	for i := 0; i < 5; i++ {
		backoffs = append(backoffs, a.MarkDown(now, p.Backoff, "refused"))
	}
	if fmt.Sprint(backoffs) != "[1s 2s 4s 8s 8s]" {
		t.Errorf("back-offs %v, want doubling up to the maximum", backoffs)
	}
	if got := names(p.Candidates("x")); got != "b:1,c:1" {
		t.Errorf("with a down: %s", got)
	}
	b.MarkDown(now, p.Backoff, "refused")
	if got := names(p.Candidates("x")); got != "c:1" {
		t.Errorf("with both primaries down, want the backup: %s", got)
	}
	c.MarkDown(now, p.Backoff, "refused")
	if got := p.Candidates("x"); len(got) != 0 {
		t.Errorf("all down: %s", names(got))
	}
	e := p.Unavailable()
	if e.Code() != http.StatusServiceUnavailable || !strings.Contains(e.Detail, "all 3 members") || !strings.Contains(e.Detail, "(last error: refused)") {
		t.Errorf("unavailable: %d %s", e.Code(), e.Detail)
	}
	now = now.Add(1500 * time.Millisecond) // b's and c's first back-off ends
	if got := names(p.Candidates("x")); got != "b:1,c:1" {
		t.Errorf("after b's back-off: %s", got)
	}
	if !b.MarkUp(now) || b.MarkUp(now) {
		t.Error("MarkUp should report the recovery once")
	}
	if st := a.State(now); st.Healthy || st.Fails != 5 || st.LastError != "refused" || st.DownFor <= 0 {
		t.Errorf("state of a: %+v", st)
	}
}

func TestSetMembersKeepsHealth(t *testing.T) {
	p := &Pool{Name: "p", Members: members(t, "http://a:1", "http://b:1")}
	a := p.Current()[0]
	a.MarkDown(time.Now(), Backoff{}, "x")
	removed := p.SetMembers(members(t, "http://a:1", "http://c:1 weight=2"))
	if names(removed) != "b:1" {
		t.Errorf("removed %s", names(removed))
	}
	if p.Current()[0] != a {
		t.Error("an unchanged member was replaced")
	}
	p.SetMembers(members(t, "http://a:1 weight=3"))
	if na := p.Current()[0]; na == a || na.Healthy(time.Now()) || na.Weight != 3 {
		t.Error("a changed member did not take over the old one's health")
	}
}

func TestFault(t *testing.T) {
	refusal := func(code int, h http.Header) error {
		return RefusalError("http://m:1", &http.Response{StatusCode: code, Header: h})
	}
	squidErr := func(v string) http.Header { return http.Header{"X-Squid-Error": {v}} }
	tests := []struct {
		name          string
		err           error
		member, retry bool
	}{
		{"407", refusal(407, nil), true, true},
		{"403", refusal(403, nil), true, true},
		{"503-member", refusal(503, nil), true, true},
		{"503-squid-connect-fail", refusal(503, squidErr("ERR_CONNECT_FAIL 111")), false, true},
		{"500-squid-cannot-forward", refusal(500, squidErr("ERR_CANNOT_FORWARD 0")), false, true},
		{"502-proxy-status-dns", refusal(502, http.Header{"Proxy-Status": {`squid; error=dns_timeout`}}), false, true},
		{"502-proxy-status-other", refusal(502, http.Header{"Proxy-Status": {`squid; error=proxy_internal_error`}}), true, true},
		{"400", refusal(400, nil), false, false},
		{"refused", &proxystatus.Error{Type: proxystatus.ConnectionRefused, Upstream: "m"}, true, true},
		{"dial-timeout", &proxystatus.Error{Type: proxystatus.ConnectionTimeout, Upstream: "m"}, true, true},
		{"answer-timeout", &proxystatus.Error{Type: proxystatus.ConnectionReadTimeout, Upstream: "m"}, false, false},
		{"answer-header-too-large", &proxystatus.Error{Type: proxystatus.HTTPResponseHeaderSize, Upstream: "m"}, true, true},
		{"origin-header-too-large", &proxystatus.Error{Type: proxystatus.HTTPResponseHeaderSize}, false, false},
		{"not-a-member", &proxystatus.Error{Type: proxystatus.ConnectionRefused}, false, false},
		{"plain-error", errors.New("x"), false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, r := Fault(tt.err)
			if m != tt.member || r != tt.retry {
				t.Errorf("Fault = member %v retry %v, want %v %v", m, r, tt.member, tt.retry)
			}
		})
	}
	e := proxystatus.From(refusal(407, nil))
	if e.Code() != 502 || e.Type != proxystatus.UpstreamAuthRequired {
		t.Errorf("407 answered as %d %s", e.Code(), e.Type)
	}
}

func TestPolicyParse(t *testing.T) {
	for in, want := range map[string]Policy{"": RoundRobin, "Round-Robin": RoundRobin, "random": Random, "least_conn": LeastConn, "sticky": Sticky} {
		if got, err := ParsePolicy(in); err != nil || got != want {
			t.Errorf("%q: %v %v", in, got, err)
		}
	}
	if _, err := ParsePolicy("fastest"); err == nil {
		t.Error("unknown policy accepted")
	}
	if Policy(9).String() != "unknown(9)" {
		t.Error("String of a bad value")
	}
}

func BenchmarkCandidates(b *testing.B) {
	for _, pol := range []Policy{RoundRobin, Random, LeastConn, Sticky} {
		b.Run(pol.String(), func(b *testing.B) {
			p := &Pool{Name: "p", Policy: pol, Members: members(b, "http://a:1 weight=2", "http://b:1", "http://c:1", "http://d:1 backup")}
			now := time.Now()
			var buf [8]*Member
			b.ReportAllocs()
			for b.Loop() {
				if c := p.AppendCandidates(buf[:0], "api.partner.example", now); len(c) != 4 {
					b.Fatal(len(c))
				}
			}
		})
	}
}

func BenchmarkMarkUpHealthy(b *testing.B) {
	m := members(b, "http://a:1")[0]
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		m.MarkUp(now)
		m.Healthy(now)
	}
}
