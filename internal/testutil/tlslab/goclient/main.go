// Command goclient is the Go client of the tlslab tests: it fetches an
// https URL with net/http (new connection each time, system roots as Go
// loads them) and prints "ok STATUS" or "fail REASON"; with a second
// argument it waits for a line on stdin and fetches again.
package main

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"
)

func get(u string) {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, Proxy: http.ProxyFromEnvironment}}
	resp, err := c.Get(u)
	if err != nil {
		fmt.Println("fail", strings.ReplaceAll(err.Error(), "\n", " "))
		return
	}
	resp.Body.Close()
	fmt.Println("ok", resp.StatusCode)
}

func main() {
	get(os.Args[1])
	if len(os.Args) > 2 {
		bufio.NewReader(os.Stdin).ReadString('\n')
		get(os.Args[1])
	}
}
