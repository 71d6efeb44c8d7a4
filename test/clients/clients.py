"""Real clients for egret's NO_PROXY differential tests (Python side).

The test (internal/noproxy/differential_test.go) runs this script inside a
network namespace where every name of the cases resolves to a local origin
and the proxies of the cases are local recording proxies; the test decides
"direct" or "proxy" from what those listeners see.

Usage: python3 clients.py MODE [PATH]
MODE: urllib | requests (in-process: the case's environment replaces
os.environ, then a real request is made) | libcurl (PATH is a libcurl.so.4:
curl_easy_perform in-process, through ctypes; libcurl, not the curl tool,
reads the proxy variables, at every transfer) | curl | wget (PATH, default
from PATH, is run once per case with the case's environment).
One case per line on stdin: {"id", "env", "url"}; once its request has
ended, one line on stdout: {"id", "detail", "version"}.
"""
import json
import os
import subprocess
import sys

TIMEOUT = 5


def run_curl(binary, case, env):
    p = subprocess.run([binary, "-s", "-S", "-k", "--max-time", str(TIMEOUT), "-o", "/dev/null",
                        "-w", "%{http_code}", case["url"]], env=env, capture_output=True, text=True)
    return "exit %d %s %s" % (p.returncode, p.stdout.strip(), p.stderr.strip().splitlines()[-1] if p.stderr.strip() else "")


def run_wget(binary, case, env):
    p = subprocess.run([binary, "--no-config", "-O", "/dev/null", "--tries=1", "-T", str(TIMEOUT),
                        "--no-check-certificate", case["url"]], env=env, capture_output=True, text=True)
    lines = [l for l in p.stderr.strip().splitlines() if l.strip()]
    return "exit %d %s" % (p.returncode, lines[-1] if lines else "")


class LibCurl(object):
    """curl_easy_perform through ctypes: the environment is read by libcurl
    itself (getenv) at each transfer, so os.environ changes apply."""
    URL, WRITEFUNCTION, TIMEOUT, SSL_VERIFYPEER, SSL_VERIFYHOST, NOSIGNAL = 10002, 20011, 13, 64, 81, 99
    RESPONSE_CODE = 0x200002

    def __init__(self, path):
        import ctypes
        self.c = ctypes
        self.lib = ctypes.CDLL(path)
        self.lib.curl_version.restype = ctypes.c_char_p
        self.lib.curl_easy_init.restype = ctypes.c_void_p
        self.lib.curl_easy_strerror.restype = ctypes.c_char_p
        self.lib.curl_global_init(3)
        proto = ctypes.CFUNCTYPE(ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_void_p)
        self.sink = proto(lambda ptr, size, n, data: size * n)

    def version(self):
        return self.lib.curl_version().decode().split()[0].split("/")[1]

    def get(self, url):
        c = self.c
        h = c.c_void_p(self.lib.curl_easy_init())
        try:
            self.lib.curl_easy_setopt(h, self.URL, c.c_char_p(url.encode("utf-8")))
            self.lib.curl_easy_setopt(h, self.WRITEFUNCTION, self.sink)
            self.lib.curl_easy_setopt(h, self.TIMEOUT, c.c_long(TIMEOUT))
            self.lib.curl_easy_setopt(h, self.NOSIGNAL, c.c_long(1))
            self.lib.curl_easy_setopt(h, self.SSL_VERIFYPEER, c.c_long(0))
            self.lib.curl_easy_setopt(h, self.SSL_VERIFYHOST, c.c_long(0))
            rc = self.lib.curl_easy_perform(h)
            code = c.c_long(0)
            self.lib.curl_easy_getinfo(h, self.RESPONSE_CODE, c.byref(code))
            return "curl %d %s, status %d" % (rc, self.lib.curl_easy_strerror(rc).decode(), code.value)
        finally:
            self.lib.curl_easy_cleanup(h)


_tls = []


def run_inprocess(mode, case):
    os.environ.clear()
    os.environ.update(case["env"])
    try:
        if mode == "urllib":
            import urllib.request
            import ssl
            if not _tls:  # one context: loading it is slow, and it reads no proxy setting
                ctx = ssl.create_default_context()
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
                _tls.append(ctx)
            # A new opener per case: ProxyHandler reads the variables when built.
            opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=_tls[0]))
            with opener.open(case["url"], timeout=TIMEOUT) as r:
                r.read()
                return "status %d" % r.status
        import requests
        # requests reads the variables at every request (trust_env).
        r = requests.Session().get(case["url"], timeout=TIMEOUT, verify=False, allow_redirects=False)
        return "status %d" % r.status_code
    except Exception as e:
        return "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")


def version(mode, binary):
    if mode == "libcurl":
        return binary.version()
    if mode == "urllib":
        return "%d.%d.%d" % sys.version_info[:3]
    if mode == "requests":
        import requests
        return requests.__version__
    out = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.split()
    # "curl 7.88.1 (x86_64...)" / "GNU Wget 1.21.3 built on ..."
    return out[1] if mode == "curl" else out[2]


def main():
    mode = sys.argv[1]
    binary = sys.argv[2] if len(sys.argv) > 2 else mode
    if mode == "libcurl":
        binary = LibCurl(binary)
    if mode == "requests":
        import warnings
        warnings.filterwarnings("ignore")
    ver = version(mode, binary)
    base_path = os.environ.get("PATH", "/usr/bin:/bin")
    lib_path = os.environ.get("EGRET_CLIENT_LIBS")  # for a curl unpacked from a .deb
    for line in sys.stdin:
        if not line.strip():
            continue
        case = json.loads(line)
        if mode in ("curl", "wget"):
            env = dict(case["env"])
            env.setdefault("PATH", base_path)
            if lib_path:
                env["LD_LIBRARY_PATH"] = lib_path
            detail = run_curl(binary, case, env) if mode == "curl" else run_wget(binary, case, env)
        elif mode == "libcurl":
            os.environ.clear()
            os.environ.update(case["env"])
            detail = binary.get(case["url"])
        else:
            detail = run_inprocess(mode, case)
        sys.stdout.write(json.dumps({"id": case["id"], "detail": detail, "version": ver}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
