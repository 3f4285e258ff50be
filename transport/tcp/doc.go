// Package tcp is gonccl's TCP transport. It sets up authenticated connections between
// ranks: it picks the network interface (GONCCL_SOCKET_IFNAME syntax), listens, dials
// with retries, and runs the handshake by which both ends prove they know the
// communicator's secret, so that a process that cannot prove it is dropped before any
// of its bytes reach a collective (iface.go, conn.go, handshake.go). With a *TLS
// (GONCCL_TLS=1) every connection is TLS 1.3 with mutual certificate checks, the
// handshake running inside it, and TLS and plain ranks refuse each other at once
// (tls.go, secure.go, tlsbatch.go). Over those
// connections it runs the transport.Link of a pair of ranks: StreamLink frames
// messages over one ordered byte stream (stream.go), StripedLink cuts large frames
// across several connections that move in parallel (striped.go). Between hosts each
// connection is a Session (session.go, resume.go, ring.go): when it breaks while both
// ends live, it is made again, authenticated as at first, and resumes its byte stream
// from the delivered counts; it may carry a CRC32C per record (checksum.go).
//
// It knows nothing of communicators or collectives: core decides which connections
// to make and which link to run over them.
package tcp
