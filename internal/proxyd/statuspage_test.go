package proxyd

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"golang.org/x/net/html"

	"egret.io/egret/internal/testutil/chromium"
	"egret.io/egret/internal/testutil/squid"
)

// TestStatusPageInChromium renders the admin status page of a running
// egret in headless Chromium after real traffic (a healthy Squid and a
// dead member, a denial, a failing destination behind a breaker) and checks
// the rendered DOM: pools and member health, breakers, top destinations,
// recent denials and errors; the inline script ran under the page's CSP and
// nothing is loaded from elsewhere.
func TestStatusPageInChromium(t *testing.T) {
	_, port := origin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, strings.Repeat("x", 5000)) }))
	sq := squid.Start(t, squid.Options{Hosts: map[string]string{"partner.test": "127.0.0.1"}})
	dead := deadAddr(t)
	_, deadPort, _ := splitHostPort(dead)
	e := runEgret(t, map[string]string{
		"UPSTREAM_PROXY":         "http://" + dead + ",http://" + sq.Addr,
		"DENY_SUFFIXES":          ".blocked.test",
		"DIRECT_HOSTS":           "down.test",
		"EGRET_BREAKER_FAILURES": "2",
	}, "", map[string]string{"partner.test": "127.0.0.1", "down.test": "127.0.0.1", "api.blocked.test": "127.0.0.1"})
	for i := 0; i < 3; i++ {
		if code, _, _ := curl(t, e.Proxy, "http://partner.test:"+port+"/", false); code != "200" {
			t.Fatalf("request through the pool: %s", code)
		}
	}
	if code, _, _ := curl(t, e.Proxy, "http://api.blocked.test:"+port+"/", false); code != "403" {
		t.Fatalf("denied request: %s", code)
	}
	for i := 0; i < 3; i++ {
		curl(t, e.Proxy, "http://down.test:"+deadPort+"/", false)
	}

	url := "http://" + e.Admin + "/"
	dom := chromium.DumpDOM(t, url)
	if os.Getenv("EGRET_SCREENSHOT") != "" {
		chromium.Screenshot(t, url, os.Getenv("EGRET_SCREENSHOT"), 1280, 1600)
	}
	doc, err := html.Parse(strings.NewReader(dom))
	if err != nil {
		t.Fatal(err)
	}
	body := find(doc, func(n *html.Node) bool { return n.Data == "body" })[0]
	if attr(body, "data-rendered") != "1" {
		t.Error("the page's script did not run (blocked by its CSP?)")
	}
	members := find(doc, func(n *html.Node) bool { return hasClass(n, "member") })
	health := map[string]string{}
	for _, m := range members {
		health[attr(m, "data-member")] = attr(m, "data-healthy")
	}
	if health["http://"+dead] != "false" || health["http://"+sq.Addr] != "true" || len(members) != 2 {
		t.Errorf("member health in the page: %v", health)
	}
	if s := text(find(doc, func(n *html.Node) bool { return attr(n, "id") == "pool-default" })...); !strings.Contains(s, "1 of 2 healthy") {
		t.Errorf("pool heading %q", s)
	}
	top := text(find(doc, func(n *html.Node) bool { return attr(n, "id") == "top" })...)
	if !strings.Contains(top, "partner.test:"+port) {
		t.Errorf("top destinations lack the pool's destination:\n%s", top)
	}
	denied := text(find(doc, func(n *html.Node) bool { return n.Data == "tr" && hasClass(n, "denied") })...)
	if !strings.Contains(denied, "api.blocked.test:"+port) || !strings.Contains(denied, "http_request_denied") {
		t.Errorf("recent denials:\n%s", denied)
	}
	errs := text(find(doc, func(n *html.Node) bool { return n.Data == "tr" && hasClass(n, "error") })...)
	if !strings.Contains(errs, "down.test:"+deadPort) {
		t.Errorf("recent errors:\n%s", errs)
	}
	breakers := find(doc, func(n *html.Node) bool { return hasClass(n, "breaker") })
	if len(breakers) != 1 || attr(breakers[0], "data-state") != "open" || !strings.Contains(text(breakers...), "down.test:"+deadPort) {
		t.Errorf("breakers: %q", text(breakers...))
	}
	for _, tm := range find(doc, func(n *html.Node) bool { return n.Data == "time" }) {
		if s := text(tm); !strings.HasSuffix(s, " ago") {
			t.Errorf("time not rendered as an age: %q", s)
		}
	}
	// Nothing from elsewhere: every link and source is relative.
	for _, n := range find(doc, func(n *html.Node) bool { return attr(n, "src") != "" || attr(n, "href") != "" }) {
		for _, a := range []string{attr(n, "src"), attr(n, "href")} {
			if a != "" && !strings.HasPrefix(a, "/") {
				t.Errorf("external reference %q", a)
			}
		}
	}
	if strings.Contains(dom, "@") {
		t.Error("the page shows something with user info")
	}

	// status.json carries the same facts.
	resp, err := http.Get("http://" + e.Admin + "/status.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Pools []struct {
			Name    string
			Healthy int
		}
		Breakers []struct{ Dest, State string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || len(st.Pools) != 1 || st.Pools[0].Healthy != 1 || len(st.Breakers) != 1 {
		t.Errorf("status.json: %+v %v", st, err)
	}
}

func splitHostPort(s string) (string, string, error) {
	i := strings.LastIndexByte(s, ':')
	return s[:i], s[i+1:], nil
}

func find(n *html.Node, match func(*html.Node) bool) []*html.Node {
	var out []*html.Node
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && match(n) {
			out = append(out, n)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return out
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func hasClass(n *html.Node, c string) bool {
	for _, f := range strings.Fields(attr(n, "class")) {
		if f == c {
			return true
		}
	}
	return false
}

func text(ns ...*html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	for _, n := range ns {
		walk(n)
		b.WriteString("\n")
	}
	return strings.TrimSpace(b.String())
}
