"""gRPC C-core's side of egret's NO_PROXY differential tests
(internal/noproxy/differential_test.go), through Python's grpcio (Debian's
python3-grpcio), run inside a network namespace where every name of the
cases resolves to a local origin and the proxies are local recording
proxies: the test decides "direct" or "proxy" from what those listeners see.

One case per line on stdin: {"id", "env", "url"}. The environment replaces
os.environ (C-core reads the variables with getenv for every new channel);
the URL's host, as written, and its port are the channel's target, https://
a TLS channel, http:// a plaintext one. The channel connects once; when it
is ready or has failed, one line on stdout: {"id", "detail", "version"}.
"""
import json
import os
import re
import sys
import time

os.environ["GRPC_DNS_RESOLVER"] = "native"
import grpc  # noqa: E402

# grpc_connectivity_state values.
READY, TRANSIENT_FAILURE, SHUTDOWN = 2, 3, 4
NAMES = {0: "IDLE", 1: "CONNECTING", 2: "READY", 3: "TRANSIENT_FAILURE", 4: "SHUTDOWN"}
# Each channel has its own subchannels and never reconnects once it has
# failed: a closed channel's backoff timer would otherwise connect again
# during a later case.
OPTIONS = [
    ("grpc.use_local_subchannel_pool", 1),
    ("grpc.initial_reconnect_backoff_ms", 86400000),
    ("grpc.min_reconnect_backoff_ms", 86400000),
    ("grpc.max_reconnect_backoff_ms", 86400000),
]


def target(u):
    m = re.match(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://([^/?#]*)", u)
    tls = m.group(1).lower() == "https"
    auth = m.group(2).rsplit("@", 1)[-1]
    host, port = auth, "443" if tls else "80"
    if auth.startswith("["):
        end = auth.index("]")
        host, rest = auth[: end + 1], auth[end + 1 :]
        if rest.startswith(":") and len(rest) > 1:
            port = rest[1:]
    elif ":" in auth:
        host, p = auth.rsplit(":", 1)
        if p:
            port = p
    return host + ":" + port, tls


def run(c):
    os.environ.clear()
    os.environ.update(c["env"])
    # getaddrinfo (the test's /etc/hosts) rather than c-ares, which asks
    # the namespace's absent DNS server first; names only, no proxy setting.
    os.environ["GRPC_DNS_RESOLVER"] = "native"
    tgt, tls = target(c["url"])
    if tls:
        ch = grpc.secure_channel(tgt, grpc.ssl_channel_credentials(), options=OPTIONS)
    else:
        ch = grpc.insecure_channel(tgt, options=OPTIONS)
    # The channel's own connectivity watch (grpc.Channel.subscribe polls
    # it from a thread, which costs a fifth of a second a case).
    cc = ch._channel
    state = cc.check_connectivity_state(True)
    deadline = time.time() + 3
    while state not in (READY, TRANSIENT_FAILURE, SHUTDOWN) and time.time() < deadline:
        cc.watch_connectivity_state(state, deadline)
        state = cc.check_connectivity_state(False)
    ch.close()
    last = [NAMES.get(state, state)]
    return "%s %s" % (tgt, last[0])


def main():
    for line in sys.stdin:
        c = json.loads(line)
        detail = run(c)
        sys.stdout.write(json.dumps({"id": c["id"], "detail": detail, "version": grpc.__version__}) + "\n")
        sys.stdout.flush()


main()
