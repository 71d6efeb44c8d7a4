package realnode

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// pauseSource is the sandbox image's program: it waits for a signal and
// reaps children.
const pauseSource = `package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range ch {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			if pid, _ := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 {
				break
			}
		}
	}
}
`

// getSource is the client image's Go HTTP client (/bin/get): it reads the
// proxy variables as every Go program does (http.ProxyFromEnvironment)
// unless -direct, sends -X METHOD with -H "Name: value" if given, and
// prints the status line and the body.
const getSource = `package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

func main() {
	insecure := flag.Bool("k", false, "do not verify the server's certificate")
	direct := flag.Bool("direct", false, "ignore the proxy variables")
	method := flag.String("X", "GET", "the request's method")
	header := flag.String("H", "", "a request header, \"Name: value\"")
	flag.Parse()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: *insecure}
	if *direct {
		tr.Proxy = nil
	}
	c := &http.Client{Transport: tr, Timeout: 20 * time.Second}
	req, err := http.NewRequest(*method, flag.Arg(0), nil)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	if k, v, ok := strings.Cut(*header, ":"); ok {
		req.Header.Set(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	resp, err := c.Do(req)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	fmt.Printf("%d\n%s", resp.StatusCode, b)
}
`

// goBuild builds a one-file static program.
func goBuild(dir, name, src string) (string, error) {
	d := filepath.Join(dir, "src-"+name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(d, "go.mod"), []byte("module "+name+"\n\ngo 1.26\n"), 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(d, "main.go"), []byte(src), 0o644); err != nil {
		return "", err
	}
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, ".")
	cmd.Dir = d
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", name, err, b)
	}
	return out, nil
}

// file is one entry of an image layer.
type file struct {
	path string // without leading slash
	mode int64
	data []byte
	link string // symlink target when set
}

// dockerArchive writes a docker-archive (what `ctr images import` takes)
// with one layer holding files, tagged ref, running cmd.
func dockerArchive(out, ref string, cmd []string, files []file) error {
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	dirs := map[string]bool{}
	mtime := time.Unix(0, 0)
	for _, f := range files {
		parts := strings.Split(f.path, "/")
		for i := 1; i < len(parts); i++ {
			d := strings.Join(parts[:i], "/") + "/"
			if !dirs[d] {
				dirs[d] = true
				if err := tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755, ModTime: mtime}); err != nil {
					return err
				}
			}
		}
		if f.link != "" {
			if err := tw.WriteHeader(&tar.Header{Name: f.path, Typeflag: tar.TypeSymlink, Linkname: f.link, Mode: 0o777, ModTime: mtime}); err != nil {
				return err
			}
			continue
		}
		if err := tw.WriteHeader(&tar.Header{Name: f.path, Typeflag: tar.TypeReg, Mode: f.mode, Size: int64(len(f.data)), ModTime: mtime}); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	sum := sha256.Sum256(layer.Bytes())
	diffID := "sha256:" + hex.EncodeToString(sum[:])
	cfg, _ := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Cmd": cmd, "Env": []string{"PATH=/bin:/usr/bin:/sbin:/usr/sbin"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{diffID}},
	})
	csum := sha256.Sum256(cfg)
	cfgName := hex.EncodeToString(csum[:]) + ".json"
	manifest, _ := json.Marshal([]map[string]any{{"Config": cfgName, "RepoTags": []string{ref}, "Layers": []string{"layer.tar"}}})
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	ow := tar.NewWriter(f)
	for _, e := range []struct {
		name string
		data []byte
	}{{"layer.tar", layer.Bytes()}, {cfgName, cfg}, {"manifest.json", manifest}} {
		if err := ow.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.data)), ModTime: mtime}); err != nil {
			return err
		}
		if _, err := ow.Write(e.data); err != nil {
			return err
		}
	}
	return ow.Close()
}

// busyboxFiles is /bin/busybox (Debian's busybox-static) and a symlink for
// each applet.
func busyboxFiles() ([]file, error) {
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return nil, err
	}
	out, err := exec.Command("/bin/busybox", "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("busybox --list: %v", err)
	}
	files := []file{{path: "bin/busybox", mode: 0o755, data: bb}}
	for _, a := range strings.Fields(string(out)) {
		if a != "busybox" {
			files = append(files, file{path: "bin/" + a, link: "busybox"})
		}
	}
	files = append(files,
		file{path: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/tmp:/bin/sh\n")},
		file{path: "etc/group", mode: 0o644, data: []byte("root:x:0:\napp:x:1000:\n")},
		file{path: "tmp/.keep", mode: 0o644},
	)
	return files, nil
}
