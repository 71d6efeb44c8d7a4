// Command tunnels opens a fixed number of CONNECT tunnels through a proxy,
// -c at a time, each carrying one GET /small with Connection: close (the
// setup test of tools/bench, counted instead of timed): run a proxy under
// strace -f -c, perf stat or a uprobe while it runs and divide by -n for the
// cost per tunnel (docs/performance.md, "Counts per tunnel").
//
//	go run ./tools/bench/tunnels -serve -origin 127.0.0.2:18080 &   # the origin
//	go run ./tools/bench/tunnels -proxy 127.0.0.1:3128 -origin 127.0.0.2:18080 -n 2000
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	proxy := flag.String("proxy", "", "the proxy's address (host:port)")
	origin := flag.String("origin", "127.0.0.2:18080", "the origin's address: where -serve listens, what the tunnels connect to")
	n := flag.Int("n", 5000, "tunnels to open")
	c := flag.Int("c", 16, "tunnels open at a time")
	serve := flag.Bool("serve", false, "serve the origin (answers 64 bytes) instead of opening tunnels")
	ready := flag.String("ready", "", "wait until this file exists before opening tunnels")
	hold := flag.Bool("hold", false, "open -n idle tunnels (CONNECT, nothing sent), -c at a time, and hold them until interrupted")
	flag.Parse()
	small := strings.Repeat("x", 64)
	if *serve {
		srv := &http.Server{Addr: *origin, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "64")
			io.WriteString(w, small)
		})}
		log.Fatal(srv.ListenAndServe())
	}
	if *ready != "" {
		for {
			if _, err := os.Stat(*ready); err == nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if *hold {
		holdIdle(*proxy, *origin, *n, *c)
		return
	}
	var left atomic.Int64
	left.Store(int64(*n))
	var fails atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < *c; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 4096)
			for left.Add(-1) >= 0 {
				if err := one(*proxy, *origin, buf); err != nil {
					fails.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	fmt.Fprintf(os.Stderr, "%d tunnels, %d failed, %v\n", *n, fails.Load(), time.Since(start))
}

func one(proxy, origin string, buf []byte) error {
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", origin, origin)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s", resp.Status)
	}
	fmt.Fprintf(c, "GET /small HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", origin)
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	got, err := io.CopyBuffer(io.Discard, resp.Body, buf)
	resp.Body.Close()
	if got != 64 {
		return fmt.Errorf("got %d %v", got, err)
	}
	return nil
}

// holdIdle opens n tunnels with nothing sent through them, c at a time,
// says so on stderr and holds them until the process is interrupted: read
// the proxy's RSS or heap profile meanwhile.
func holdIdle(proxy, origin string, n, c int) {
	conns := make([]net.Conn, n)
	var next, fails atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < c; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := next.Add(1) - 1
				if k >= int64(n) {
					return
				}
				cn, err := net.Dial("tcp", proxy)
				if err == nil {
					fmt.Fprintf(cn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", origin, origin)
					var resp *http.Response
					if resp, err = http.ReadResponse(bufio.NewReader(cn), &http.Request{Method: "CONNECT"}); err == nil && resp.StatusCode != 200 {
						err = fmt.Errorf("%s", resp.Status)
					}
				}
				if err != nil {
					fails.Add(1)
					continue
				}
				conns[k] = cn
			}
		}()
	}
	wg.Wait()
	fmt.Fprintf(os.Stderr, "%d idle tunnels held, %d failed, %v\n", int64(n)-fails.Load(), fails.Load(), time.Since(start))
	select {}
}
