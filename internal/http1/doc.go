// Package http1 is egret's HTTP/1.1 wire, apart from any decision about
// where a message goes (internal/proxy decides that): reading a client's
// requests with the limits and checks a proxy needs, the framing of what
// egret sends on every hop, writing request and response heads, copying
// bodies both ways (chunked, trailers, 100-continue and other 1xx
// answers, stalls cut by an idle timeout), and the idle keep-alive
// connections to origins and upstream members.
//
// It is built on net/http's message primitives — http.ReadRequest and
// http.ReadResponse parse every message, httputil's chunked writer frames
// chunked bodies — the way net/http's server and Transport are, without
// their policy: a forward proxy keeps connections per next hop, streams
// bodies both ways at once, and decides framing itself.
//
// Framing is egret's own on every hop: Host, Content-Length and
// Transfer-Encoding are removed from a message's header with the
// hop-by-hop fields (RemoveHopByHop) and written again from what egret
// sends (WriteRequestHead, WriteResponseHead), so no header edit — a
// Connection token naming one of them, say — changes how the next hop
// reads the message.
package http1
