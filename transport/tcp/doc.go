// Package tcp sets up authenticated TCP connections between gonccl ranks: it picks the
// network interface (GONCCL_SOCKET_IFNAME syntax), listens, dials with retries, and runs
// the handshake by which both ends prove they know the communicator's secret. A process
// that cannot prove it is dropped before any of its bytes reach a collective.
package tcp
