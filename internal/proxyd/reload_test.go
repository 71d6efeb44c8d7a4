package proxyd

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"egret.io/egret/internal/testutil/secretvol"
)

// swapFile replaces path the way the kubelet updates a mounted ConfigMap:
// the new content is written beside it and renamed over it.
func swapFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".new-"+filepath.Base(path))
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func statusJSON(t *testing.T, e *egret) map[string]any {
	t.Helper()
	resp, err := http.Get("http://" + e.Admin + "/status.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	json.NewDecoder(resp.Body).Decode(&m)
	return m
}

// TestLiveReload: a change of the configuration file swaps routes, rules
// and pools in without a restart, while an open tunnel keeps running and a
// member keeps its health; a file that does not validate keeps the
// configuration in force and says why (log, metric, status page); SIGHUP
// reloads too; settings a reload cannot apply are named (issue 12).
func TestLiveReload(t *testing.T) {
	_, port := origin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello "+r.Host) }))
	echo := tcpOrigin(t, func(c net.Conn) { io.Copy(c, c) })
	dead := deadAddr(t)
	hosts := map[string]string{"a.test": "127.0.0.1", "b.test": "127.0.0.1"}
	conf := func(deny, pool string) string {
		return fmt.Sprintf("version: 1\ndeny:\n  hosts: [%s]\npools:\n  spare:\n    members: [\"http://%s\"]\nroutes:\n- hosts: [%s]\n  action: upstream:spare\n", deny, dead, pool)
	}
	e := runEgret(t, nil, conf("a.test", "pooled.test"), hosts)
	get := func(host string) string {
		code, _, _ := curl(t, e.Proxy, "http://"+host+":"+port+"/", false)
		return code
	}
	if get("a.test") != "403" || get("b.test") != "200" {
		t.Fatal("the first configuration is not in force")
	}
	// The dead member of pool spare goes down.
	if code := get("pooled.test"); code != "502" {
		t.Fatalf("pool with a dead member: %s", code)
	}
	memberDown := fmt.Sprintf(`egret_upstream_member_up{member="http://%s",pool="spare"} 0`, dead)
	if !strings.Contains(e.metrics(t), memberDown) {
		t.Fatalf("the dead member is not down:\n%s", grep(e.metrics(t), "member_up"))
	}
	tun := dialRaw(t, e.Proxy)
	tun.Send("CONNECT 127.0.0.1:%s HTTP/1.1\r\nHost: x\r\n\r\n", echo)
	if resp, err := http.ReadResponse(tun.BR, &http.Request{Method: http.MethodConnect}); err != nil || resp.StatusCode != 200 {
		t.Fatalf("tunnel: %v %v", resp, err)
	}

	t.Run("file-change", func(t *testing.T) {
		swapFile(t, e.ConfigFile, conf("b.test", "pooled.test"))
		waitFor(t, func() bool { return get("b.test") == "403" })
		if get("a.test") != "200" {
			t.Error("the old deny rule is still in force")
		}
		if !strings.Contains(e.metrics(t), `egret_config_reloads_total{result="ok",what="config"} 1`) {
			t.Errorf("reload not counted:\n%s", grep(e.metrics(t), "reloads"))
		}
		if !strings.Contains(e.metrics(t), memberDown) {
			t.Error("the member's health did not survive the reload")
		}
	})
	t.Run("tunnel-kept", func(t *testing.T) {
		tun.Send("ping")
		b := make([]byte, 4)
		if _, err := io.ReadFull(tun.BR, b); err != nil || string(b) != "ping" {
			t.Fatalf("the tunnel opened before the reload: %q %v", b, err)
		}
	})
	t.Run("bad-file-keeps-the-configuration", func(t *testing.T) {
		swapFile(t, e.ConfigFile, conf("b.test", "pooled.test")+"limits:\n  max_tunels: 3\n")
		waitFor(t, func() bool {
			return strings.Contains(e.metrics(t), `egret_config_reloads_total{result="error",what="config"} 1`)
		})
		if get("b.test") != "403" || get("a.test") != "200" {
			t.Error("a configuration that failed validation changed the routes")
		}
		cfg, _ := statusJSON(t, e)["config"].(map[string]any)
		if msg, _ := cfg["last_error"].(string); !strings.Contains(msg, "max_tunels") {
			t.Errorf("status.json does not say why: %v", cfg)
		}
		// The reload counts the error before it logs it: wait for the line.
		waitFor(t, func() bool { return strings.Contains(e.Log.String(), "configuration not reloaded") })
	})
	t.Run("sighup", func(t *testing.T) {
		// Write the file without a watchable change in between: the
		// signal, not the watch, must pick it up. The watch sees it too;
		// either way the rules must follow.
		swapFile(t, e.ConfigFile, conf("a.test, b.test", "pooled.test")+"timeouts:\n  dial: 3s\n")
		e.Hangup <- syscall.SIGHUP
		waitFor(t, func() bool { return get("a.test") == "403" && get("b.test") == "403" })
		waitFor(t, func() bool {
			cfg, _ := statusJSON(t, e)["config"].(map[string]any)
			r, _ := cfg["needs_restart"].([]any)
			return len(r) == 1 && r[0] == "timeouts"
		})
		// The line is written after the new state and status are in
		// force, which the waits above saw: wait for it too.
		waitFor(t, func() bool { return strings.Contains(e.Log.String(), "take effect at the next restart") })
	})
}

// TestEnvDirReload is the gateway's upstream Secret created after the
// gateway started (docs/kubernetes.md's order): mounted as the settings
// directory, it takes effect without a restart — direct before, through
// the upstream after, through the new upstream after a change, direct again
// once it is deleted — and the status page names the directory.
func TestEnvDirReload(t *testing.T) {
	_, port := origin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "direct") }))
	upstreamProxy := func(name string) string {
		_, p := origin(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// A forward proxy's request line carries the absolute URI.
			if r.URL.Host == "" {
				http.Error(w, "not a proxy request", http.StatusBadRequest)
				return
			}
			io.WriteString(w, "via "+name)
		}))
		return "http://127.0.0.1:" + p
	}
	up1, up2 := upstreamProxy("up1"), upstreamProxy("up2")
	vol := secretvol.New(t, nil)
	e := runEgret(t, map[string]string{"EGRET_ENV_DIR": vol.Dir, "EGRET_CREDENTIALS_CHECK_INTERVAL": "200ms"}, "", map[string]string{"origin.test": "127.0.0.1"})
	get := func() string {
		code, body, err := curl(t, e.Proxy, "http://origin.test:"+port+"/", false)
		if err != nil || code != "200" {
			return fmt.Sprintf("%s %v", code, err)
		}
		return body
	}
	if got := get(); got != "direct" {
		t.Fatalf("no upstream Secret yet: %q", got)
	}
	vol.Update(t, map[string]string{"UPSTREAM_PROXY": up1})
	waitFor(t, func() bool { return get() == "via up1" })
	vol.Update(t, map[string]string{"UPSTREAM_PROXY": up2})
	waitFor(t, func() bool { return get() == "via up2" })
	// A value that does not validate keeps the one in force.
	vol.Update(t, map[string]string{"UPSTREAM_PROXY": "ftp://bad"})
	waitFor(t, func() bool {
		return strings.Contains(e.metrics(t), `egret_config_reloads_total{result="error",what="config"} 1`)
	})
	if got := get(); got != "via up2" {
		t.Errorf("after a bad value: %q", got)
	}
	vol.Update(t, map[string]string{})
	os.Remove(filepath.Join(vol.Dir, "UPSTREAM_PROXY"))
	waitFor(t, func() bool { return get() == "direct" })
	cfg, _ := statusJSON(t, e)["config"].(map[string]any)
	if cfg["env_dir"] != vol.Dir {
		t.Errorf("status page config: %v", cfg)
	}
}
