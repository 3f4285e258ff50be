package core

// What capi's GPU-resident data path (package cuda's Shared) needs of a communicator.

// OneHost reports whether every rank of the communicator runs on this host (same
// hostname, boot id and network namespace: see hostIdentity), so they can share
// device memory.
func (c *Comm) OneHost() bool { return c.nranks == 1 || len(c.hosts) == 1 }

// CompletedRequest returns a request that has already completed with err: for an
// operation that is done, as far as the host is concerned, once it is issued (capi's
// device path enqueues its work on a CUDA stream and returns).
func CompletedRequest(err error) *Request {
	r := newRequest()
	r.complete(err)
	return r
}

// PendingRequest returns a request and the function that completes it (once; later
// calls do nothing): for an operation capi finishes issuing on a goroutine of its own.
func PendingRequest() (*Request, func(error)) {
	r := newRequest()
	return r, r.complete
}
