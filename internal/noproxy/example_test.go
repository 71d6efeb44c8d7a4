package noproxy

import "fmt"

func ExampleExplain() {
	env := Env{"HTTP_PROXY": "http://127.0.0.1:3128", "NO_PROXY": "10.0.0.0/8,.svc"}
	cs, _ := SelectClients([]string{"go", "curl", "python-urllib"})
	rs, _ := Explain("http://10.1.2.3/", env, cs)
	for _, r := range rs {
		fmt.Printf("%s %s %s: %s\n", r.Client, r.Decision, r.Proxy, r.Reason)
	}
	// Output:
	// go direct : matched entry `10.0.0.0/8` (CIDR) in NO_PROXY
	// curl direct : no proxy: http_proxy, all_proxy, ALL_PROXY unset or empty; HTTP_PROXY ignored: curl reads only lower-case http_proxy
	// python-urllib proxy http://127.0.0.1:3128: proxy from HTTP_PROXY; no NO_PROXY entry matches 10.1.2.3; entry `10.0.0.0/8` ignored: python-urllib has no CIDR support
}
