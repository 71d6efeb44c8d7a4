package proxyd

import (
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"egret.io/egret/internal/testutil/kdc"
	"egret.io/egret/internal/testutil/secretvol"
	"egret.io/egret/internal/testutil/squid"
)

// TestKerberosFromSecret runs egret proxy the way a pod does: the member
// says auth=negotiate, the mounted Secret holds the username, a keytab and
// a krb5.conf (no password), and a Squid that accepts only Kerberos
// stands for the corporate proxy. The Secret is then swapped, kubelet
// style, to another principal with a password.
func TestKerberosFromSecret(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a KDC and Squid")
	}
	k := kdc.Start(t, kdc.Options{})
	k.AddUser(t, "alice", "alice-pw")
	keytab, err := os.ReadFile(k.AddKeytab(t, "svc-egret"))
	if err != nil {
		t.Fatal(err)
	}
	sq := squid.Start(t, squid.Options{Auth: squid.AuthNegotiate, Keytab: k.AddKeytab(t, "HTTP/127.0.0.1"), Env: k.Env(),
		Hosts: map[string]string{"partner.test": "127.0.0.1"}})
	_, port := origin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	vol := secretvol.New(t, map[string]string{"username": "svc-egret", "keytab": string(keytab), "krb5.conf": k.Krb5Conf()})
	e := runEgret(t, map[string]string{
		"UPSTREAM_PROXY":                   "http://" + sq.Addr + " auth=negotiate",
		"PROXY_CREDENTIALS_DIR":            vol.Dir,
		"EGRET_CREDENTIALS_CHECK_INTERVAL": "1h",
	}, "", nil)
	get := func(tunnel bool) (string, string) {
		code, body, _ := curl(t, e.Proxy, "http://partner.test:"+port+"/", tunnel)
		return code, body
	}
	for _, tunnel := range []bool{false, true} {
		if code, body := get(tunnel); code != "200" || body != "ok" {
			t.Fatalf("tunnel %v: %s %q", tunnel, code, body)
		}
	}
	sq.WaitLog(t, "GET http://partner.test:"+port+"/ svc-egret@"+k.Realm)
	sq.WaitLog(t, "CONNECT partner.test:"+port+" svc-egret@"+k.Realm)
	resp, err := http.Get("http://" + e.Admin + "/status.json")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"auth": "negotiate HTTP/127.0.0.1"`) {
		t.Errorf("status.json does not show the member's scheme and SPN:\n%s", b)
	}

	vol.Update(t, map[string]string{"username": "alice", "password": "alice-pw", "krb5.conf": k.Krb5Conf()})
	waitFor(t, func() bool { return strings.Count(e.Log.String(), "upstream credentials reloaded") >= 1 })
	if code, _ := get(false); code != "200" {
		t.Fatalf("after the swap: %s", code)
	}
	sq.WaitLog(t, "GET http://partner.test:"+port+"/ alice@"+k.Realm)
	if strings.Contains(e.Log.String(), "alice-pw") {
		t.Error("the password reached the log")
	}
}
