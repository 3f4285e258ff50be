// Package shm is the Link between two ranks on the same host: a pair of
// single-producer/single-consumer byte rings, one per direction, in a memfd segment
// that both processes map. A frame is the header the TCP links send too
// (transport.EncodeHeader), then the payload; both stream through the ring in pieces,
// so a frame may be larger than the ring.
//
// Waiting is a short adaptive spin, then a futex (FUTEX_WAIT/FUTEX_WAKE, not the
// private variants: the word is in memory shared between processes) on an event word
// next to the counter; every wait honours the caller's deadline. The pair's TCP
// connection stays open beside the segment as a liveness channel: its EOF means the
// peer closed or died, which wakes every waiter here.
//
// This package owns the unsafe code that touches the shared mapping; nothing in it
// lives on the Go heap. It must not know about communicators or collectives.
package shm
