// Command grpcgo is grpc-go's side of egret's NO_PROXY differential tests
// (internal/noproxy): scripts/deps/29-grpc.sh builds it against each
// grpc-go release a model row checks, and differential_test.go runs it in a
// network namespace, one process per environment (net/http's
// ProxyFromEnvironment, which grpc-go asks, reads the variables once).
// One case per line on stdin, {"id", "url"}: the URL's host (as written)
// and port are the channel's target, https:// a TLS channel, http:// a
// plaintext one. The channel connects once; when it is ready or has failed
// (the test's listeners answer nothing gRPC), one line on stdout:
// {"id", "detail", "version"}. Where it connected is what the test saw.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// target is the host:port a URL stands for, and whether it is TLS.
func target(u string) (string, bool) {
	scheme, rest, _ := strings.Cut(u, "://")
	auth := rest
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		auth = rest[:i]
	}
	if i := strings.LastIndexByte(auth, '@'); i >= 0 {
		auth = auth[i+1:]
	}
	tlsOn := strings.EqualFold(scheme, "https")
	port := "80"
	if tlsOn {
		port = "443"
	}
	host := auth
	if strings.HasPrefix(auth, "[") {
		end := strings.IndexByte(auth, ']')
		host = auth[1:end]
		if p := auth[end+1:]; strings.HasPrefix(p, ":") && len(p) > 1 {
			port = p[1:]
		}
	} else if i := strings.LastIndexByte(auth, ':'); i >= 0 {
		host = auth[:i]
		if auth[i+1:] != "" {
			port = auth[i+1:]
		}
	}
	return net.JoinHostPort(host, port), tlsOn
}

func main() {
	dec := json.NewDecoder(bufio.NewReader(os.Stdin))
	enc := json.NewEncoder(os.Stdout)
	for {
		var c struct {
			ID  string `json:"id"`
			URL string `json:"url"`
		}
		if dec.Decode(&c) != nil {
			return
		}
		tgt, tlsOn := target(c.URL)
		creds := insecure.NewCredentials()
		if tlsOn {
			creds = credentials.NewTLS(&tls.Config{})
		}
		detail := ""
		cc, err := grpc.NewClient(tgt, grpc.WithTransportCredentials(creds))
		if err != nil {
			detail = err.Error()
		} else {
			cc.Connect()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			s := cc.GetState()
			for s != connectivity.Ready && s != connectivity.TransientFailure && s != connectivity.Shutdown {
				if !cc.WaitForStateChange(ctx, s) {
					break
				}
				s = cc.GetState()
			}
			cancel()
			detail = tgt + " " + s.String()
			cc.Close()
		}
		enc.Encode(map[string]string{"id": c.ID, "detail": detail, "version": grpc.Version})
	}
}
