package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzForwardFraming is a differential test of egret's framing: the fuzzer
// writes one or more raw requests on a connection; egret forwards them to
// a capture origin (every dial goes there), which parses the bytes it
// received with net/http's reader. What net/http's reader parses from the
// fuzzer's input is the reference. Each answer egret gives answers one
// request of the input, in order: an answer from the origin must come
// from a request with the same method, target, Host and body as the
// reference's; a refusal of egret's must leave that request (and, when it
// closes, everything after it) unsent. The origin must receive nothing
// else, nothing it cannot parse, and a victim's request on a second
// connection afterwards must get its own answer.
func FuzzForwardFraming(f *testing.F) {
	for _, s := range framingSeeds() {
		f.Add(s)
	}
	o := startWire(f, nil)
	var d net.Dialer
	p := startProxyWith(f, proxyConf{hosts: map[string]string{"origin.test": "127.0.0.1", "a": "127.0.0.1"},
		timeouts: Timeouts{HeaderRead: time.Second, ResponseHeader: 2 * time.Second}}, func(opts *Options) {
		opts.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, o.addr)
		}
	})
	victim := 0
	f.Fuzz(func(t *testing.T, raw string) {
		o.reset()
		want, send := referenceParse(raw)
		answers := sendRaw(t, p.Addr, send, want)
		victim++
		vpath := "/victim-" + strconv.Itoa(victim)
		vc := dialWire(t, p.Addr)
		vc.send("GET http://origin.test" + vpath + " HTTP/1.1\r\nHost: origin.test\r\n\r\n")
		resp, _, body := vc.read("GET")
		vc.c.Close()
		victimOK := resp.StatusCode == 200 && body == answerBody("GET", vpath)
		o.settle(t, p)
		got, errs := o.requests()
		var problems []string
		if !victimOK {
			problems = append(problems, fmt.Sprintf("the victim got %d %q", resp.StatusCode, body))
		}
		for _, e := range errs {
			problems = append(problems, "the origin could not parse what egret sent: "+e)
		}
		bySeq := map[int]int{}
		for i, g := range got {
			bySeq[g.seq] = i
		}
		used := make([]bool, len(got))
		last := 0
		for i, a := range answers {
			if !a.origin {
				continue
			}
			if i >= len(want) {
				problems = append(problems, fmt.Sprintf("answer %d came from the origin, but net/http parses only %d requests", i+1, len(want)))
				continue
			}
			j, ok := bySeq[a.seq]
			if !ok {
				problems = append(problems, fmt.Sprintf("answer %d names request #%d, which the origin did not receive", i+1, a.seq))
				continue
			}
			used[j] = true
			g, w := got[j], want[i]
			if a.seq <= last {
				problems = append(problems, fmt.Sprintf("answer %d is for request #%d, out of order", i+1, a.seq))
			}
			last = a.seq
			if g.method != w.method || g.target != w.uri || g.host != w.host || g.body != w.body || g.bodyErr != nil {
				problems = append(problems, fmt.Sprintf("request %d: the origin received %s %s (Host %s) body %s, net/http read %s %s (Host %s) body %s",
					i+1, g.method, g.target, g.host, clip([]byte(g.body)), w.method, w.uri, w.host, clip([]byte(w.body))))
			}
		}
		victims := 0
		for j, g := range got {
			switch {
			case used[j]:
			case g.target == vpath:
				victims++
			case g.bodyErr != nil && refusedWithBodyError(answers, want, g):
				// The client's body broke while egret streamed it: egret
				// cut the origin connection off and refused.
			default:
				problems = append(problems, "the origin received a request no answer came from: "+g.String())
			}
		}
		if victims != 1 {
			problems = append(problems, fmt.Sprintf("the victim's request reached the origin %d times", victims))
		}
		if len(problems) > 0 {
			var wl strings.Builder
			for i, w := range want {
				fmt.Fprintf(&wl, "  %d: %s %s (Host %s) body %s\n", i+1, w.method, w.uri, w.host, clip([]byte(w.body)))
			}
			t.Fatalf("input %s\n%s\nnet/http reads:\n%segret answered: %v\nthe origin received:\n%s", clip([]byte(raw)), strings.Join(problems, "\n"), wl.String(), answers, o.dump())
		}
	})
}

// refRequest is a request net/http's reader parsed from the fuzzer's input.
type refRequest struct {
	method, uri, host, body string
	bodyErr                 bool
}

// referenceParse reads raw as net/http's reader does, skipping empty lines
// before a request as egret does. It returns the requests and the part of
// raw to send: it ends before a CONNECT or an https:// request (egret
// tunnels the bytes after a CONNECT, and would speak TLS to the capture
// origin) and after a request whose body is broken.
func referenceParse(raw string) ([]refRequest, string) {
	r := strings.NewReader(raw)
	br := bufio.NewReader(r)
	pos := func() int { return len(raw) - r.Len() - br.Buffered() }
	var reqs []refRequest
	for {
		for {
			b, err := br.Peek(1)
			if err != nil || (b[0] != '\r' && b[0] != '\n') {
				break
			}
			br.Discard(1)
		}
		start := pos()
		req, err := http.ReadRequest(br)
		if err != nil {
			return reqs, raw
		}
		if req.Method == http.MethodConnect || strings.EqualFold(req.URL.Scheme, "https") {
			return reqs, raw[:start]
		}
		rr := refRequest{method: req.Method, uri: req.URL.RequestURI(), host: req.URL.Host}
		body, err := io.ReadAll(req.Body)
		rr.body = string(body)
		if err != nil {
			rr.bodyErr = true
			return append(reqs, rr), raw
		}
		reqs = append(reqs, rr)
	}
}

// fuzzAnswer is one answer egret gave: from the origin (with the number
// of the request it answers) or egret's own.
type fuzzAnswer struct {
	origin bool
	seq    int
	status int
}

func (a fuzzAnswer) String() string {
	if a.origin {
		return fmt.Sprintf("origin#%d", a.seq)
	}
	return fmt.Sprintf("egret:%d", a.status)
}

// sendRaw writes send on a new connection to addr, half-closes it, and
// reads every answer until egret closes the connection.
func sendRaw(t *testing.T, addr, send string, want []refRequest) []fuzzAnswer {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	go func() {
		io.WriteString(c, send)
		c.(*net.TCPConn).CloseWrite()
	}()
	br := bufio.NewReader(c)
	var answers []fuzzAnswer
	for {
		method := http.MethodGet
		if i := len(answers); i < len(want) {
			method = want[i].method
		}
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			return answers
		}
		if resp.StatusCode < 200 {
			continue // 100 Continue, 103
		}
		_, err = io.Copy(io.Discard, resp.Body)
		a := fuzzAnswer{status: resp.StatusCode}
		if s := resp.Header.Get("X-Wire-Seq"); s != "" {
			a.origin = true
			a.seq, _ = strconv.Atoi(s)
		}
		answers = append(answers, a)
		if err != nil {
			return answers
		}
	}
}

// refusedWithBodyError reports whether g is the request whose body broke
// in the input, and egret refused it (or the connection ended) rather
// than passing on an answer.
func refusedWithBodyError(answers []fuzzAnswer, want []refRequest, g wireReq) bool {
	i := len(want) - 1
	if i < 0 || !want[i].bodyErr || want[i].method != g.method || want[i].uri != g.target {
		return false
	}
	return i >= len(answers) || !answers[i].origin
}

// framingSeeds are the attacks of smuggle_test.go, for origin.test.
func framingSeeds() []string {
	const host = "origin.test"
	var seeds []string
	for _, v := range requestConnVariants {
		for _, framing := range []string{"length", "chunked"} {
			for _, kind := range []string{"complete", "open"} {
				fh, fb := framed(framing, smuggledPayload(kind, host))
				seeds = append(seeds, "POST http://"+host+"/a HTTP/1.1\r\nHost: "+host+"\r\n"+v.lines+fh+"\r\n"+fb+
					"GET http://"+host+"/b HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
			}
		}
	}
	req := func(method, path, lines, framing, body string) string {
		s := method + " http://" + host + path + " HTTP/1.1\r\nHost: " + host + "\r\n" + lines
		if framing == "" {
			return s + "\r\n"
		}
		fh, fb := framed(framing, body)
		return s + fh + "\r\n" + fb
	}
	seeds = append(seeds,
		req("GET", "/p1", "", "", "")+req("GET", "/p2", "", "", ""),
		req("POST", "/p1", "", "length", "hello")+req("HEAD", "/p2", "", "", "")+req("PUT", "/p3", "", "chunked", "abc"),
		req("POST", "/p1", "Connection: Content-Length\r\n", "length", "x")+req("POST", "/p2", "Connection: keep-alive, content-length\r\n", "length", "yz"),
		req("POST", "/p1", "Expect: 100-continue\r\nConnection: Content-Length\r\n", "length", smuggledPayload("complete", host)),
		req("POST", "/up", "Connection: Upgrade, Content-Length\r\nUpgrade: websocket\r\n", "length", smuggledPayload("complete", host)),
		req("GET", "/ws", "Connection: Upgrade, Content-Length\r\nUpgrade: websocket\r\nContent-Length: 0\r\n", "", ""),
		req("POST", "/t", "Connection: Trailer, TE\r\nTE: trailers\r\nTrailer: X-T\r\nTransfer-Encoding: chunked\r\n", "", "")+"3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n",
		"GET http://"+host+"/10 HTTP/1.0\r\nConnection: keep-alive, Content-Length\r\nContent-Length: 3\r\n\r\nabcGET http://"+host+"/11 HTTP/1.0\r\n\r\n",
		"\r\n\r\n"+req("GET", "/crlf", "", "", ""),
		req("GET", "/origin-form-next", "", "", "")+"GET / HTTP/1.1\r\nHost: x\r\n\r\n"+req("GET", "/after", "", "", ""),
		// Refusals: nothing after them may reach the origin.
		req("POST", "/r", "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", "", "")+"0\r\n\r\n"+req("GET", "/after", "", "", ""),
		req("POST", "/r", "Connection: Content-Length\r\nContent-Length: 5\r\nContent-Length: 6\r\n", "", "")+"hello!"+req("GET", "/after", "", "", ""),
		req("POST", "/r", "Connection: Transfer-Encoding\r\nTransfer-Encoding: gzip\r\n", "", "")+"0\r\n\r\n"+req("GET", "/after", "", "", ""),
		"GET http://"+host+"/r HTTP/1.1\r\nHost: "+host+"\r\n evil.test\r\n\r\n"+req("GET", "/after", "", "", ""),
		req("POST", "/r", "Transfer-Encoding: chunked\r\n", "", "")+"zz\r\n"+req("GET", "/after", "", "", ""),
	)
	return seeds
}
