// Package transport defines the Link over which gonccl's collective algorithms move
// bytes between two ranks, the frame header every message carries, and a Link that
// frames messages over any ordered byte stream (a TCP connection, a net.Pipe in tests).
//
// The algorithms in core see only Link: they never open a socket. The connection setup
// lives in subpackages: tcp/ dials, accepts and authenticates the sockets (the stream
// links here run over them), and shm/ makes a Link over a shared-memory segment
// between two ranks on one host.
package transport
