// Package transport defines the Link over which gonccl's collective algorithms move
// bytes between two ranks, the Header every collective frame carries and its wire
// form (frame.go, shared by every transport), and the MsgConn that carries
// point-to-point messages (send/recv, status, heartbeats) on a connection of their own.
//
// The algorithms in core see only Link: they never open a socket. The Links live in
// subpackages: tcp/ sets up authenticated TCP connections and runs the TCP links over
// them (StreamLink on one connection, StripedLink over several); shm/ runs a Link over
// a shared-memory segment between two ranks on one host. Both import this package,
// never each other; this package imports neither, and knows nothing of communicators.
package transport
