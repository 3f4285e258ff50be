package cuda

// StreamWaitValue32 enqueues on s a wait for the 32-bit flag at addr to reach v. The
// caller has s's context current.
func (d *Driver) StreamWaitValue32(s Stream, addr uintptr, v uint32) error {
	return d.streamWaitValue32(s, addr, v)
}

// StreamWriteValue32 enqueues on s a write of v to the 32-bit flag at addr. The
// caller has s's context current.
func (d *Driver) StreamWriteValue32(s Stream, addr uintptr, v uint32) error {
	return d.streamWriteValue32(s, addr, v)
}
