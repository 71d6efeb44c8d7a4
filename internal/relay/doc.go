// Package relay moves bytes between the two sides of a tunnel.
//
// Each direction runs in its own goroutine and holds no buffer while it
// waits: it takes a buffer from a pool, reads and writes until a read
// finds nothing at hand (reads never block: the socket's raw descriptor is
// read non-blocking), returns the buffer and waits for the source to
// become readable in the runtime's network poller, holding no user memory.
// A wake-up that finds nothing (the poller is edge-triggered and may be
// stale) sends the direction back to the wait. Buffers grow from 16 KiB to 256 KiB while a direction keeps
// filling them, and once a direction has moved a MiB it splices (splice(2)
// socket → pipe → socket, splice_linux.go) for as long as data keeps
// coming, so a bulk transfer is not copied through user memory. A direction that has
// seen nothing for ParkAfter (200 ms) parks: its goroutine ends and its
// socket waits in one epoll set shared by the process (park_linux.go), so
// thousands of idle tunnels cost neither buffers nor goroutine stacks, only
// their sockets and a small struct. With EGRET_RELAY_DETACH=1 (Detach, an
// experiment, off by default) a tunnel whose two directions are parked
// also gives up its net.Conns and keeps bare descriptors until it wakes
// (detach_linux.go). When one side ends its stream the other
// side's write half is closed (half-close), and the tunnel ends when both
// directions are done or either fails.
package relay
