// Command minproxy is the smallest correct forward proxy in Go, the yardstick
// tools/bench measures beside egret: what any Go proxy costs at least.
//
// net/http's server reads every request. CONNECT dials the destination,
// answers 200, hijacks the connection and copies both ways with io.Copy
// (between two TCP connections that is splice(2)), half-closing each side
// when the other ends. Any other request must be in absolute-URI form; it
// goes through one shared http.Transport with the hop-by-hop header fields
// removed both ways (httputil.ReverseProxy does that). No routing, policy,
// limits, logging or metrics: what a proxy costs beyond this is its own.
//
//	go run ./tools/bench/minproxy -listen 127.0.0.1:3130
package main

import (
	"flag"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:3130", "address to listen on")
	flag.Parse()
	fwd := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL = r.In.URL // absolute-URI form: the URL names the origin
		},
		Transport: &http.Transport{
			MaxIdleConnsPerHost: 256,
			DisableCompression:  true,
			DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		},
		ErrorLog: log.New(io.Discard, "", 0),
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodConnect:
			tunnel(w, r)
		case r.URL.IsAbs() && r.URL.Scheme == "http":
			fwd.ServeHTTP(w, r)
		default:
			http.Error(w, "a forward proxy: want CONNECT or an absolute http:// URI", http.StatusBadRequest)
		}
	})
	srv := &http.Server{Addr: *listen, Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	log.Fatal(srv.ListenAndServe())
}

// tunnel serves CONNECT: dial, 200, then bytes both ways until both sides
// have ended.
func tunnel(w http.ResponseWriter, r *http.Request) {
	up, err := net.DialTimeout("tcp", r.Host, 10*time.Second)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer up.Close()
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer c.Close()
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		// What the client sent behind its CONNECT is in brw's buffer.
		if n := brw.Reader.Buffered(); n > 0 {
			b, _ := brw.Reader.Peek(n)
			if _, err := up.Write(b); err != nil {
				return
			}
		}
		io.Copy(up, c)
		up.(*net.TCPConn).CloseWrite()
	}()
	io.Copy(c, up)
	c.(*net.TCPConn).CloseWrite()
	<-done
}
