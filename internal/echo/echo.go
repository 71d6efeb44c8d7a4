package echo

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"sort"
	"time"
)

// Reply is the JSON an echo server answers with.
type Reply struct {
	RemoteAddr string              `json:"remote_addr"` // ip:port of the caller
	RemoteIP   string              `json:"remote_ip"`   // the caller's (egress) IP
	Method     string              `json:"method"`
	Host       string              `json:"host"`
	Path       string              `json:"path"`
	Query      string              `json:"query,omitempty"`
	Proto      string              `json:"proto"`
	TLS        bool                `json:"tls"`
	Headers    map[string][]string `json:"headers"`
	BodyBytes  int64               `json:"body_bytes"`
	Time       time.Time           `json:"time"`
}

// MaxBody is how much request body the echo server reads and counts.
const MaxBody = 64 << 20

// Handler answers every request with a Reply.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, io.LimitReader(r.Body, MaxBody))
		ip, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			ip = r.RemoteAddr
		}
		rep := Reply{
			RemoteAddr: r.RemoteAddr,
			RemoteIP:   ip,
			Method:     r.Method,
			Host:       r.Host,
			Path:       r.URL.Path,
			Query:      r.URL.RawQuery,
			Proto:      r.Proto,
			TLS:        r.TLS != nil,
			Headers:    map[string][]string{},
			BodyBytes:  n,
			Time:       time.Now().UTC(),
		}
		keys := make([]string, 0, len(r.Header))
		for k := range r.Header {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			rep.Headers[k] = r.Header[k]
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(rep)
	})
}

// Server returns an http.Server for the echo handler with sane timeouts.
func Server() *http.Server {
	return &http.Server{
		Handler:           Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    1 << 20,
	}
}
