// Package relay moves bytes between the two sides of a tunnel.
//
// Each direction runs in its own goroutine and holds no buffer while it
// waits: it waits for the source to become readable in the runtime's network
// poller (a zero-copy peek, no user memory), then takes a buffer from a pool,
// reads and writes until the source has nothing more to give, and returns
// the buffer. Buffers grow from 16 KiB to 256 KiB while a direction keeps
// filling them, so a bulk transfer moves large chunks. A direction that has
// seen nothing for ParkAfter (200 ms) parks: its goroutine ends and its
// socket waits in one epoll set shared by the process (park_linux.go), so
// thousands of idle tunnels cost neither buffers nor goroutine stacks, only
// their sockets and a small struct. When one side ends its stream the other
// side's write half is closed (half-close), and the tunnel ends when both
// directions are done or either fails.
package relay
