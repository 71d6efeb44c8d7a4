// Command goclient is the Go side of egret's NO_PROXY differential tests for
// Go releases other than the one building egret: scripts/deps/24-go-toolchains.sh
// builds it with each Go toolchain a model row checks (from the Go module
// proxy), and internal/noproxy/differential_test.go runs it inside a network
// namespace, one process per environment (net/http reads the variables once).
// One case per line on stdin, {"id", "env", "url"}; after a real GET through
// http.DefaultTransport (ProxyFromEnvironment), one line on stdout:
// {"id", "detail", "version"}.
package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"runtime"
	"strings"
	"time"
)

func main() {
	dec := json.NewDecoder(bufio.NewReader(os.Stdin))
	enc := json.NewEncoder(os.Stdout)
	client := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	version := strings.TrimPrefix(runtime.Version(), "go")
	for {
		var c struct {
			ID  string `json:"id"`
			URL string `json:"url"`
		}
		if dec.Decode(&c) != nil {
			return
		}
		detail := ""
		if res, err := client.Get(c.URL); err != nil {
			detail = err.Error()
		} else {
			res.Body.Close()
			detail = res.Status
		}
		enc.Encode(map[string]string{"id": c.ID, "detail": detail, "version": version})
	}
}
