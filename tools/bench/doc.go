// Command bench measures egret beside other forward proxies on loopback, the harness behind
// docs/performance.md (`make bench-compare`).
//
// It starts its own origin and every proxy it measures, each on a free loopback port with a
// configuration of its own, then runs the same workloads through each, the proxies taking turns
// inside every round:
//
//	http    keep-alive GETs of a 64-byte body, absolute-URI form, -c clients for -d
//	setup   a new CONNECT tunnel per GET: dial, CONNECT, GET with Connection: close, close; -c clients for -d
//	bulk    one CONNECT tunnel carrying a -bulk byte response
//	idle    CONNECT tunnels opened and held, up to each count of -idle in turn; the proxy's RSS at each
//
// For every test it reads the user and system CPU time of the proxy's process from /proc/PID/stat
// before and after, so it reports what the proxy itself spends per request, per tunnel and per GiB,
// whatever the load generator and the origin take from the same cores. It prints a table of the
// medians over -rounds rounds, the ratios to -ref (medians of the ratios taken within each round),
// and with -json writes every round and the summary.
//
// The proxies: egret (sidecar defaults), egret-gateway (the gateway role with the configuration
// of -gateway-config), trafficserver, minproxy (tools/bench/minproxy), squid, smokescreen,
// tinyproxy, and direct (no proxy: the ceiling). scripts/bench-deps.sh installs the peers; one
// that is not installed is left out with a message, or fails the run with -require.
//
// Linux only (/proc).
package main
