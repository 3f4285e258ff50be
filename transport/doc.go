// Package transport defines the Link over which gonccl's collective algorithms move
// bytes between two ranks, the frame header every message carries, and a Link that
// frames messages over any ordered byte stream (a TCP connection, a net.Pipe in tests).
//
// The algorithms in core see only Link: they never open a socket. Implementations of
// the connection setup (tcp/, later shm/) live in subpackages.
package transport
