// Command interceptd is egret's interception engine (internal/intercept)
// behind the smallest CONNECT front, for tools/bench's intercept tests until
// `egret proxy` hands intercepted tunnels to the engine itself.
//
// Every CONNECT is dialed, answered 200 and handed to the Engine with one
// Site: a bearer credential injected from -token (a file, reloaded on
// change), and L7 rules that allow GET and HEAD anywhere and deny the rest
// (each request is judged). The origin is verified against the system
// roots plus -origin-ca. Each intercepted request writes one JSON access
// log line through internal/logsink, as egret proxy does for its own.
//
//	go run ./tools/bench/interceptd -listen 127.0.0.1:3131 -ca-dir DIR -origin-ca FILE -token FILE
package main

import (
	"bufio"
	"context"
	"flag"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"egret.io/egret/internal/intercept"
	"egret.io/egret/internal/logsink"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:3131", "address to listen on")
	caDir := flag.String("ca-dir", "", "directory with the interception CA's tls.crt and tls.key")
	originCA := flag.String("origin-ca", "", "PEM file of CAs the origins are verified with, beside the system roots")
	token := flag.String("token", "", "file holding the bearer token injected into every request")
	accessLog := flag.String("access-log", "", "file for the JSON access log (default: stdout)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	is := &intercept.Issuer{}
	if _, err := (&intercept.CADir{Path: *caDir, Issuer: is}).Load(); err != nil {
		log.Fatal(err)
	}
	var extra []byte
	if *originCA != "" {
		var err error
		if extra, err = os.ReadFile(*originCA); err != nil {
			log.Fatal(err)
		}
	}
	roots, err := intercept.OriginRoots(extra)
	if err != nil {
		log.Fatal(err)
	}
	site, err := intercept.CompileSite(intercept.SiteSpec{
		Hosts:       []string{"*.test"},
		Credentials: []intercept.CredentialSpec{{Name: "bench/token", Files: []string{*token}}},
		HTTP: intercept.RulesSpec{Rules: []intercept.RuleSpec{
			{Action: "allow", Methods: []string{"GET", "HEAD"}, PathPrefixes: []string{"/"}},
		}},
	}, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := site.Load(); err != nil {
		log.Fatal(err)
	}
	go site.Run(ctx)

	var out io.Writer = os.Stdout
	if *accessLog != "" {
		f, err := os.Create(*accessLog)
		if err != nil {
			log.Fatal(err)
		}
		out = f
	}
	sink := logsink.New(out, 0, 0)
	defer sink.Close()
	logger := slog.New(slog.NewJSONHandler(sink, nil))
	e := &intercept.Engine{Issuer: is, RootCAs: roots, Log: func(ev *intercept.Event) {
		logger.LogAttrs(context.Background(), slog.LevelInfo, "request", ev.Attrs()...)
	}}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	go func() { <-ctx.Done(); ln.Close() }()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go serve(ctx, e, site, c)
	}
}

// serve reads one CONNECT, dials it, and hands the tunnel to the engine.
func serve(ctx context.Context, e *intercept.Engine, site *intercept.Site, c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	if req.Method != http.MethodConnect || br.Buffered() > 0 {
		io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n")
		return
	}
	host, port, err := net.SplitHostPort(req.Host)
	if err != nil {
		io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n")
		return
	}
	var d net.Dialer
	o, err := d.DialContext(ctx, "tcp", req.Host)
	if err != nil {
		io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\n\r\n")
		return
	}
	io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
	c.SetDeadline(time.Time{})
	e.Serve(ctx, c, &intercept.Tunnel{
		Host: host, Port: port, Client: c.RemoteAddr().String(), Site: site, Origin: o,
		Dial: func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "tcp", req.Host) },
	})
}
