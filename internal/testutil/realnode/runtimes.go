package realnode

import (
	"archive/tar"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"egret.io/egret/internal/testutil"
)

// RuntimesImage is the client image of the real runtimes — curl, Python
// (requests), Node.js (fetch), Java (HttpClient), Ruby (Net::HTTP) and Go
// (/bin/get) — each with a client under /opt/clients that fetches one URL
// and prints the status line and the body, as /bin/get does. Built from
// the machine's Debian packages (their files as dpkg lists them, plus the
// shared libraries their programs load) and the Node.js that
// scripts/deps/20-npm.sh installs; imported on the first RuntimesImage
// call (Node.RuntimesImage), not at bring-up.
const RuntimesImage = "localhost/runtimes:1"

// NodeVersion is the Node.js of the runtimes image (one egret's NO_PROXY
// model checks live: NODE_USE_ENV_PROXY needs 24.5+ / 22.21+).
const NodeVersion = "24.22.3"

// runtimePackages are the Debian packages whose files make each runtime;
// their shared libraries come from ELF dependencies, not package
// dependencies (which would pull in X11 for the JRE).
var runtimePackages = map[string][]string{
	"base":   {"ca-certificates", "openssl"},
	"curl":   {"curl"},
	"python": {"python3-minimal", "python3.11-minimal", "libpython3.11-minimal", "libpython3.11-stdlib", "python3-requests", "python3-urllib3", "python3-certifi", "python3-idna", "python3-charset-normalizer", "python3-chardet", "python3-six"},
	"java":   {"openjdk-17-jre-headless"},
	"ruby":   {"ruby", "ruby3.1", "libruby3.1", "rubygems-integration", "ruby-rubygems"},
}

// The clients, one per runtime: url [method [header]], where header is
// "Name: value" (the interception tests send a method and a credential of
// the pod's own). Each prints the status code on its first line and the
// body after it, and exits non-zero on an error (a refused certificate
// included).
const (
	pyClient = `import sys, requests
a = sys.argv[1:]
h = dict([[s.strip() for s in a[2].split(":", 1)]]) if len(a) > 2 else {}
r = requests.request(a[1] if len(a) > 1 else "GET", a[0], headers=h, timeout=20)
print(r.status_code)
sys.stdout.write(r.text)
`
	nodeClient = `const [url, method = "GET", header] = process.argv.slice(2);
const headers = {};
if (header) { const i = header.indexOf(":"); headers[header.slice(0, i).trim()] = header.slice(i + 1).trim(); }
const r = await fetch(url, { method, headers, signal: AbortSignal.timeout(20000) });
console.log(r.status);
process.stdout.write(await r.text());
`
	javaClient = `import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;

public class Get {
    public static void main(String[] args) throws Exception {
        HttpClient c = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(20)).build();
        HttpRequest.Builder b = HttpRequest.newBuilder(URI.create(args[0])).timeout(Duration.ofSeconds(20))
            .method(args.length > 1 ? args[1] : "GET", HttpRequest.BodyPublishers.noBody());
        if (args.length > 2) {
            int i = args[2].indexOf(':');
            b.header(args[2].substring(0, i).trim(), args[2].substring(i + 1).trim());
        }
        HttpResponse<String> r = c.send(b.build(), HttpResponse.BodyHandlers.ofString());
        System.out.println(r.statusCode());
        System.out.print(r.body());
    }
}
`
	rubyClient = `require "net/http"
u = URI(ARGV[0])
req = Net::HTTPGenericRequest.new(ARGV[1] || "GET", false, true, u)
if ARGV[2]
  k, v = ARGV[2].split(":", 2)
  req[k.strip] = v.strip
end
r = Net::HTTP.start(u.host, u.port, use_ssl: u.scheme == "https") { |h| h.request(req) }
puts r.code
print r.body
`
	curlClient = `#!/bin/sh
set -e
url=$1 method=${2:-GET}
if [ -n "$3" ]; then
	curl -sS --max-time 20 -X "$method" -H "$3" -o /tmp/curl-body -w '%{http_code}\n' "$url"
else
	curl -sS --max-time 20 -X "$method" -o /tmp/curl-body -w '%{http_code}\n' "$url"
fi
cat /tmp/curl-body
`
)

// RuntimeCommand is the command that fetches url with runtime (curl,
// python, node, java, ruby, go) in the runtimes image.
func RuntimeCommand(runtime, url string) []string {
	return RuntimeRequest(runtime, url, "", "")
}

// RuntimeRequest is RuntimeCommand with a method and a header
// ("Name: value"); empty means GET and none.
func RuntimeRequest(runtime, url, method, header string) []string {
	var args []string
	if method != "" || header != "" {
		if method == "" {
			method = "GET"
		}
		args = append(args, method)
		if header != "" {
			args = append(args, header)
		}
	}
	switch runtime {
	case "curl":
		return append([]string{"/opt/clients/get-curl", url}, args...)
	case "python":
		return append([]string{"/usr/bin/python3", "/opt/clients/get.py", url}, args...)
	case "node":
		return append([]string{"/usr/local/bin/node", "/opt/clients/get.mjs", url}, args...)
	case "java":
		return append([]string{"/usr/bin/java", "-cp", "/opt/clients", "Get", url}, args...)
	case "ruby":
		return append([]string{"/usr/bin/ruby", "/opt/clients/get.rb", url}, args...)
	case "go":
		g := []string{"/bin/get"}
		if len(args) > 0 {
			g = append(g, "-X", args[0])
		}
		if len(args) > 1 {
			g = append(g, "-H", args[1])
		}
		return append(g, url)
	}
	panic("realnode: no runtime " + runtime)
}

// Runtimes are the runtimes of RuntimesImage.
var Runtimes = []string{"curl", "python", "node", "java", "ruby", "go"}

// rootEntry is one entry of a root file system built from host files.
type rootEntry struct {
	src  string // host file to copy (regular files)
	data []byte // or these bytes
	mode int64
	link string // symlink target when set
	size int64
	mod  time.Time
}

// rootfs collects host files at their canonical paths (directory symlinks
// resolved), following symlinks and ELF dependencies.
type rootfs struct {
	entries map[string]*rootEntry // key: path without leading slash
}

func newRootfs() *rootfs { return &rootfs{entries: map[string]*rootEntry{}} }

// libDirs are the dynamic linker's default and configured directories.
var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

// addHost adds host path p (a file, a symlink and what it points to, or a
// directory and everything under it) at its canonical path.
func (r *rootfs) addHost(p string) error { return r.add(p, true) }

// add is addHost; a directory is walked only when walk is set (a symlink
// to a directory brings the link alone: the directory's files come from
// their package, and the JRE's links reach into the whole JDK).
func (r *rootfs) add(p string, walk bool) error {
	dir, base := filepath.Split(filepath.Clean(p))
	rdir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	cp := filepath.Join(rdir, base)
	key := strings.TrimPrefix(cp, "/")
	if _, ok := r.entries[key]; ok || key == "" {
		return nil
	}
	fi, err := os.Lstat(cp)
	if err != nil {
		return err
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(cp)
		if err != nil {
			return err
		}
		r.entries[key] = &rootEntry{link: target}
		if !filepath.IsAbs(target) {
			target = filepath.Join(rdir, target)
		}
		if err := r.add(target, false); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	case fi.IsDir():
		if !walk {
			return nil
		}
		des, err := os.ReadDir(cp)
		if err != nil {
			return err
		}
		for _, de := range des {
			if err := r.addHost(filepath.Join(cp, de.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	case fi.Mode().IsRegular():
		r.entries[key] = &rootEntry{src: cp, mode: int64(fi.Mode().Perm()), size: fi.Size(), mod: fi.ModTime()}
		return r.addELFDeps(cp)
	}
	return nil
}

// addELFDeps adds the interpreter and the libraries an ELF file needs
// (DT_NEEDED, searched in its RUNPATH/RPATH, then the default directories).
func (r *rootfs) addELFDeps(p string) error {
	f, err := elf.Open(p)
	if err != nil {
		return nil // not ELF
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			b, err := io.ReadAll(prog.Open())
			if err == nil {
				if err := r.addHost(strings.TrimRight(string(b), "\x00")); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return err
				}
			}
		}
	}
	needed, err := f.ImportedLibraries()
	if err != nil || len(needed) == 0 {
		return nil
	}
	var dirs []string
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		vals, _ := f.DynString(tag)
		for _, v := range vals {
			for _, d := range strings.Split(v, ":") {
				dirs = append(dirs, strings.ReplaceAll(strings.ReplaceAll(d, "${ORIGIN}", filepath.Dir(p)), "$ORIGIN", filepath.Dir(p)))
			}
		}
	}
	dirs = append(dirs, libDirs...)
	for _, lib := range needed {
		for _, d := range dirs {
			cand := filepath.Join(d, lib)
			if _, err := os.Stat(cand); err == nil {
				if err := r.addHost(cand); err != nil {
					return err
				}
				break
			}
		}
	}
	return nil
}

// addPackages adds the files of installed Debian packages (dpkg -L),
// without documentation, manuals and translations.
func (r *rootfs) addPackages(pkgs ...string) error {
	out, err := exec.Command("dpkg", append([]string{"-L"}, pkgs...)...).Output()
	if err != nil {
		return errMissing(fmt.Sprintf("real node: the runtimes image's packages %s: dpkg -L: %v (scripts/deps/32-runtimes-image.sh installs them)", strings.Join(pkgs, " "), err))
	}
	for _, p := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "/usr/share/doc/") || strings.HasPrefix(p, "/usr/share/man/") ||
			strings.HasPrefix(p, "/usr/share/locale/") || strings.HasPrefix(p, "/usr/share/lintian/") {
			continue
		}
		fi, err := os.Lstat(p)
		if err != nil || fi.IsDir() {
			continue // directories come with their files; a diversion's path may be gone
		}
		if err := r.addHost(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

func (r *rootfs) addData(path string, mode int64, data []byte) {
	r.entries[path] = &rootEntry{data: data, mode: mode, size: int64(len(data))}
}

func (r *rootfs) addLink(path, target string) { r.entries[path] = &rootEntry{link: target} }

// key is a digest of every entry's path, kind, size and modification time
// (and the bytes of generated entries): the cache key of the image.
func (r *rootfs) key() string {
	h := sha256.New()
	for _, k := range r.sorted() {
		e := r.entries[k]
		fmt.Fprintf(h, "%s\x00%s\x00%d\x00%d\x00%o\x00", k, e.link, e.size, e.mod.UnixNano(), e.mode)
		h.Write(e.data)
	}
	return hex.EncodeToString(h.Sum(nil))[:20]
}

func (r *rootfs) sorted() []string {
	keys := make([]string, 0, len(r.entries))
	for k := range r.entries {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// writeLayer writes the entries as a tar (parent directories first) to w.
func (r *rootfs) writeLayer(w io.Writer) error {
	tw := tar.NewWriter(w)
	dirs := map[string]bool{}
	mtime := time.Unix(0, 0)
	for _, k := range r.sorted() {
		parts := strings.Split(k, "/")
		for i := 1; i < len(parts); i++ {
			d := strings.Join(parts[:i], "/") + "/"
			if !dirs[d] {
				dirs[d] = true
				mode := int64(0o755)
				if d == "tmp/" {
					mode = 0o1777
				}
				if err := tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: mode, ModTime: mtime}); err != nil {
					return err
				}
			}
		}
		e := r.entries[k]
		if e.link != "" {
			if err := tw.WriteHeader(&tar.Header{Name: k, Typeflag: tar.TypeSymlink, Linkname: e.link, Mode: 0o777, ModTime: mtime}); err != nil {
				return err
			}
			continue
		}
		if err := tw.WriteHeader(&tar.Header{Name: k, Typeflag: tar.TypeReg, Mode: e.mode, Size: e.size, ModTime: mtime}); err != nil {
			return err
		}
		if e.src == "" {
			if _, err := tw.Write(e.data); err != nil {
				return err
			}
			continue
		}
		f, err := os.Open(e.src)
		if err != nil {
			return err
		}
		n, err := io.Copy(tw, f)
		f.Close()
		if err != nil {
			return err
		}
		if n != e.size {
			return fmt.Errorf("%s changed while the image was built", e.src)
		}
	}
	return tw.Close()
}

// writeArchive writes a docker-archive of one layer (the entries) tagged
// ref, streaming the files (the image is hundreds of MB).
func (r *rootfs) writeArchive(out, ref string, cmd, env []string) error {
	tmp, err := os.CreateTemp(filepath.Dir(out), ".layer-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	h := sha256.New()
	if err := r.writeLayer(io.MultiWriter(tmp, h)); err != nil {
		return err
	}
	size, err := tmp.Seek(0, io.SeekCurrent)
	if err != nil {
		return err
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return err
	}
	cfg, _ := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Cmd": cmd, "Env": env},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(h.Sum(nil))}},
	})
	csum := sha256.Sum256(cfg)
	cfgName := hex.EncodeToString(csum[:]) + ".json"
	manifest, _ := json.Marshal([]map[string]any{{"Config": cfgName, "RepoTags": []string{ref}, "Layers": []string{"layer.tar"}}})
	part, err := os.CreateTemp(filepath.Dir(out), ".image-*")
	if err != nil {
		return err
	}
	defer os.Remove(part.Name())
	defer part.Close()
	ow := tar.NewWriter(part)
	mtime := time.Unix(0, 0)
	if err := ow.WriteHeader(&tar.Header{Name: "layer.tar", Mode: 0o644, Size: size, ModTime: mtime}); err != nil {
		return err
	}
	if _, err := io.Copy(ow, tmp); err != nil {
		return err
	}
	for _, e := range []struct {
		name string
		data []byte
	}{{cfgName, cfg}, {"manifest.json", manifest}} {
		if err := ow.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.data)), ModTime: mtime}); err != nil {
			return err
		}
		if _, err := ow.Write(e.data); err != nil {
			return err
		}
	}
	if err := ow.Close(); err != nil {
		return err
	}
	if err := part.Close(); err != nil {
		return err
	}
	return os.Rename(part.Name(), out)
}

// nodeBinary is the Node.js binary scripts/deps/20-npm.sh installs.
func nodeBinary() string {
	return filepath.Join(testutil.CacheDir(), "noproxy-clients", "node_modules", "node-"+NodeVersion, "bin", "node")
}

// runtimesRootfs collects the runtimes image's files; javaClass is the
// Java client is compiled (into opt/clients/Get.class) only when the image
// is built: its source is in the key.
func runtimesRootfs(getBin string) (*rootfs, error) {
	r := newRootfs()
	for _, name := range []string{"base", "curl", "python", "java", "ruby"} {
		if err := r.addPackages(runtimePackages[name]...); err != nil {
			return nil, err
		}
	}
	// The machine's generated certificate state (what update-ca-certificates
	// and ca-certificates-java made): the image's system roots.
	for _, p := range []string{"/etc/ssl/certs", "/etc/ssl/openssl.cnf"} {
		if err := r.addHost(p); err != nil {
			return nil, fmt.Errorf("runtimes image: %w", err)
		}
	}
	node := nodeBinary()
	if _, err := os.Stat(node); err != nil {
		return nil, errMissing(fmt.Sprintf("real node: Node.js %s not found at %s (scripts/deps/20-npm.sh)", NodeVersion, node))
	}
	fi, _ := os.Stat(node)
	r.entries["usr/local/bin/node"] = &rootEntry{src: node, mode: 0o755, size: fi.Size(), mod: fi.ModTime()}
	if err := r.addELFDeps(node); err != nil {
		return nil, err
	}
	// By content: it is rebuilt (the same bytes) at every bring-up.
	gb, err := os.ReadFile(getBin)
	if err != nil {
		return nil, err
	}
	files, err := busyboxFiles()
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		switch {
		case f.link != "":
			r.addLink(f.path, f.link)
		default:
			r.addData(f.path, f.mode, f.data)
		}
	}
	r.addData("bin/get", 0o755, gb)
	// The merged /usr of Debian 12: the ELF interpreter's path and
	// the programs' library paths go through /lib and /lib64.
	r.addLink("lib", "usr/lib")
	r.addLink("lib64", "usr/lib64")
	// java on PATH, as the alternatives system links it.
	r.addLink("usr/bin/java", "/usr/lib/jvm/java-17-openjdk-amd64/bin/java")
	r.addData("etc/nsswitch.conf", 0o644, []byte("hosts: files dns\n"))
	r.addData("opt/clients/get.py", 0o644, []byte(pyClient))
	r.addData("opt/clients/get.mjs", 0o644, []byte(nodeClient))
	r.addData("opt/clients/get.rb", 0o644, []byte(rubyClient))
	r.addData("opt/clients/get-curl", 0o755, []byte(curlClient))
	r.addData("opt/clients/Get.java", 0o644, []byte(javaClient))
	return r, nil
}

var (
	runtimesOnce sync.Once
	runtimesErr  error
)

// RuntimesImage builds (or takes from $EGRET_CACHE/realnode-images, keyed
// by the content) and imports the runtimes image once per test binary,
// and returns its reference. A missing runtime skips the test
// (testutil.Missing).
func (n *Node) RuntimesImage(t testing.TB) string {
	t.Helper()
	runtimesOnce.Do(func() { runtimesErr = n.importRuntimes(t.Logf) })
	var miss errMissing
	if errors.As(runtimesErr, &miss) {
		testutil.Missing(t, string(miss))
	}
	if runtimesErr != nil {
		t.Fatal(runtimesErr)
	}
	return RuntimesImage
}

func (n *Node) importRuntimes(logf func(string, ...any)) error {
	start := time.Now()
	dir := n.path("images")
	getBin := filepath.Join(dir, "get")
	r, err := runtimesRootfs(getBin)
	if err != nil {
		return err
	}
	out, built, err := cachedImage("runtimes", r.key(), func(out string) error {
		// The Java client, compiled by the machine's JDK for the image's JRE.
		jd, err := os.MkdirTemp(dir, "java-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(jd)
		if err := os.WriteFile(filepath.Join(jd, "Get.java"), []byte(javaClient), 0o644); err != nil {
			return err
		}
		if b, err := exec.Command("javac", "--release", "17", "-d", jd, filepath.Join(jd, "Get.java")).CombinedOutput(); err != nil {
			return errMissing(fmt.Sprintf("real node: javac (scripts/deps/21-java.sh): %v %s", err, b))
		}
		class, err := os.ReadFile(filepath.Join(jd, "Get.class"))
		if err != nil {
			return err
		}
		r.addData("opt/clients/Get.class", 0o644, class)
		if err := r.writeArchive(out, RuntimesImage, []string{"/bin/sleep", "2147483647"},
			[]string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"}); err != nil {
			return fmt.Errorf("runtimes image: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if built {
		fi, _ := os.Stat(out)
		logf("realnode: built %s (%d MiB) in %s", out, fi.Size()>>20, time.Since(start).Round(10*time.Millisecond))
	}
	t0 := time.Now()
	if _, err := n.Ctr("images", "import", out); err != nil {
		return err
	}
	logf("realnode: runtimes image ready in %s (import %s)", time.Since(start).Round(10*time.Millisecond), time.Since(t0).Round(10*time.Millisecond))
	return nil
}

// cachedImage returns $EGRET_CACHE/realnode-images/NAME-KEY.tar (KEY: a
// digest of what makes the image), which build writes when it is missing;
// the older archives of NAME are then removed. built says it was made now.
func cachedImage(name, key string, build func(out string) error) (out string, built bool, err error) {
	cache := filepath.Join(testutil.CacheDir(), "realnode-images")
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", false, err
	}
	out = filepath.Join(cache, name+"-"+key+".tar")
	if _, err := os.Stat(out); err == nil {
		return out, false, nil
	}
	old, _ := filepath.Glob(filepath.Join(cache, name+"-*.tar"))
	tmp := out + ".tmp"
	if err := build(tmp); err != nil {
		os.Remove(tmp)
		return "", false, err
	}
	if err := os.Rename(tmp, out); err != nil {
		return "", false, err
	}
	for _, o := range old {
		os.Remove(o)
	}
	return out, true, nil
}

// ClientGoImage is busybox and /bin/kubelist (internal/testutil/realnode/kubelist:
// client-go with the pod's ServiceAccount lists its namespace's pods),
// built from this module and cached by content (the program's source, the
// module's go.mod and go.sum, the Go version, busybox); imported on the
// first Node.ClientGoImage call, not at bring-up.
const ClientGoImage = "localhost/clientgo:1"

var (
	clientGoOnce sync.Once
	clientGoErr  error
)

// ClientGoImage builds (or takes from the cache) and imports the client-go
// image once per test binary, and returns its reference.
func (n *Node) ClientGoImage(t testing.TB) string {
	t.Helper()
	clientGoOnce.Do(func() { clientGoErr = n.importClientGo(t.Logf) })
	if clientGoErr != nil {
		t.Fatal(clientGoErr)
	}
	return ClientGoImage
}

func (n *Node) importClientGo(logf func(string, ...any)) error {
	start := time.Now()
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	files, err := busyboxFiles()
	if err != nil {
		return err
	}
	const pkg = "internal/testutil/realnode/kubelist"
	h := sha256.New()
	for _, f := range []string{pkg + "/main.go", "go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", f, len(b))
		h.Write(b)
	}
	h.Write([]byte(runtime.Version()))
	h.Write(files[0].data) // busybox
	out, built, err := cachedImage("clientgo", hex.EncodeToString(h.Sum(nil))[:20], func(out string) error {
		bin := filepath.Join(n.path("images"), "kubelist")
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "./"+pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
		}
		b, err := os.ReadFile(bin)
		if err != nil {
			return err
		}
		return dockerArchive(out, ClientGoImage, []string{"/bin/sleep", "2147483647"}, append(files, file{path: "bin/kubelist", mode: 0o755, data: b}))
	})
	if err != nil {
		return err
	}
	if _, err := n.Ctr("images", "import", out); err != nil {
		return err
	}
	logf("realnode: client-go image ready in %s (built now: %v)", time.Since(start).Round(10*time.Millisecond), built)
	return nil
}
