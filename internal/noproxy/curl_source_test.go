package noproxy

import (
	"bufio"
	"os"
	"strings"
	"testing"
)

// TestCurlSourceHarness holds every curl row to the answers of curl's own
// NO_PROXY matching at each range end and just outside it, compiled
// unchanged from the release's source (testdata/curl-source/harness.c),
// for every host and NO_PROXY value of the live differential: the release
// selects its row by version and that row must give each answer; 7.86.0,
// which no row covers, must differ from the row after it. This is what
// stands behind the curl row, no release of which runs here, and the ends
// of the rows whose middle does.
func TestCurlSourceHarness(t *testing.T) {
	f, err := os.Open("testdata/curl-source/proxy_check_noproxy.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		t.Fatal("empty file")
	}
	head := strings.Split(strings.TrimPrefix(sc.Text(), "# "), "\t")
	versions := head[2:]
	rows := make([]Client, len(versions))
	for i, v := range versions {
		c, err := ClientForVersion("curl", v)
		if v == "7.86.0" {
			if err == nil {
				t.Fatalf("curl@7.86.0 selects %s: no row was modelled for it", c.Name)
			}
			c, _ = ClientForVersion("curl", "7.87.0") // must differ
		} else if err != nil {
			t.Fatal(err)
		}
		rows[i] = c
	}
	n := 0
	differ := make([]int, len(versions))
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) != len(head) {
			t.Fatalf("line %q: want %d fields", sc.Text(), len(head))
		}
		host, np := f[0], strings.ReplaceAll(f[1], `\t`, "\t")
		u := "http://" + host + "/"
		if strings.Contains(host, ":") {
			u = "http://[" + host + "]/"
		}
		n++
		for i, v := range versions {
			r, err := rows[i].Decide(u, Env{"http_proxy": "http://proxy.test:3128", "no_proxy": np})
			if err != nil {
				t.Fatalf("%s %s: %v", rows[i].Name, u, err)
			}
			want := f[2+i] == "1"
			if got := r.Decision == DecisionDirect; got != want {
				differ[i]++
				if v != "7.86.0" {
					t.Errorf("host %q, no_proxy %q: curl %s bypasses=%v, row %s says %v", host, np, v, want, rows[i].Name, got)
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 1000 {
		t.Fatalf("only %d answers", n)
	}
	for i, v := range versions {
		if v == "7.86.0" && differ[i] == 0 {
			t.Errorf("curl 7.86.0 agrees with row %s on every answer: the cases do not tell the releases apart", rows[i].Name)
		}
	}
	// Each range end differs from the release just outside it.
	col := func(v string) string {
		var b strings.Builder
		f, _ := os.ReadFile("testdata/curl-source/proxy_check_noproxy.tsv")
		i := 2
		for i < len(head) && head[i] != v {
			i++
		}
		for _, l := range strings.Split(strings.TrimSpace(string(f)), "\n")[1:] {
			b.WriteString(strings.Split(l, "\t")[i])
		}
		return b.String()
	}
	for _, p := range [][2]string{{"7.86.0", "7.87.0"}, {"8.8.0", "8.9.0"}, {"8.17.0", "8.18.0"}} {
		if col(p[0]) == col(p[1]) {
			t.Errorf("curl %s and %s answer alike: the boundary between them is not shown", p[0], p[1])
		}
	}
	t.Logf("%d hosts and NO_PROXY values, curl %s: every row agrees with its releases' source", n, strings.Join(versions, ", "))
}
