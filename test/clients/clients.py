"""Real Python-side clients for egret's NO_PROXY differential tests.

Usage: python3 clients.py MODE < cases.json > results.jsonl
MODE: curl | wget (run the real binaries; run this script inside an empty
network namespace, e.g. `unshare -n`) | urllib | requests (in-process: the
real decision code runs, then the first name resolution is intercepted, so
nothing is sent anywhere).
Each case: {"id": str, "env": {NAME: VALUE}, "url": str}. Each result line:
{"id": str, "result": "D" | "P:<port>" | "E", "detail": str}. The proxies
in the cases are 127.0.0.1:<port>; any other first connection is "direct".
"""
import json
import os
import re
import socket
import subprocess
import sys

PROXY_HOST = "127.0.0.1"


class Intercepted(Exception):
    pass


def classify(host, port, proxy_ports):
    if host == PROXY_HOST and int(port) in proxy_ports:
        return "P:%d" % int(port)
    return "D"


def run_curl(case, proxy_ports):
    p = subprocess.run(["curl", "-sv", "--max-time", "5", "-o", "/dev/null", case["url"]],
                       env=case["env"], capture_output=True, text=True)
    err = p.stderr
    m = re.search(r"Trying \[?([0-9a-fA-F.:]+)\]?:(\d+)", err)
    if m:
        return classify(m.group(1), m.group(2), proxy_ports), m.group(0)
    if "Could not resolve host" in err:
        return "D", "resolve target"
    return "E", err.strip().splitlines()[-1] if err.strip() else "exit %d" % p.returncode


def run_wget(case, proxy_ports):
    p = subprocess.run(["wget", "--no-config", "-O", "/dev/null", "--tries=1", "-T", "5", case["url"]],
                       env=case["env"], capture_output=True, text=True)
    err = p.stderr
    m = re.search(r"Connecting to (?:[^ ]+ \()?\[?([0-9a-fA-F.:]+)\]?\)?:(\d+)", err)
    if m:
        return classify(m.group(1), m.group(2), proxy_ports), m.group(0)
    if "Resolving" in err:
        return "D", "resolve target"
    return "E", err.strip().splitlines()[-1] if err.strip() else "exit %d" % p.returncode


_first = []


def _getaddrinfo(host, port, *args, **kwargs):
    _first.append((host, port))
    raise Intercepted("%s:%s" % (host, port))


def run_inprocess(mode, case, proxy_ports):
    os.environ.clear()
    os.environ.update(case["env"])
    del _first[:]
    try:
        if mode == "urllib":
            import urllib.request
            opener = urllib.request.build_opener()
            opener.open(case["url"], timeout=5)
        else:
            import requests
            requests.Session().get(case["url"], timeout=5)
    except Exception as e:  # the interception or a client error
        if _first:
            host, port = _first[0]
            return classify(host, port, proxy_ports), "%s:%s" % (host, port)
        return "E", "%s: %s" % (type(e).__name__, e)
    return "E", "no connection attempted"


def main():
    mode = sys.argv[1]
    cases = json.load(sys.stdin)
    proxy_ports = {9, 8}
    if mode in ("urllib", "requests"):
        socket.getaddrinfo = _getaddrinfo
    for case in cases:
        env = dict(case["env"])
        env.setdefault("PATH", "/usr/bin:/bin")
        case = dict(case, env=env)
        if mode == "curl":
            res, detail = run_curl(case, proxy_ports)
        elif mode == "wget":
            res, detail = run_wget(case, proxy_ports)
        else:
            case["env"] = {k: v for k, v in env.items() if k != "PATH"} if mode != "requests" else case["env"]
            res, detail = run_inprocess(mode, case, proxy_ports)
        out = {"id": case["id"], "result": res, "detail": detail}
        if mode == "requests":
            import requests
            out["version"] = requests.__version__
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
