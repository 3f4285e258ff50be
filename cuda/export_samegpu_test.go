package cuda

// MemAlloc allocates n bytes of device memory (cuMemAlloc, which CUDA IPC exports) in
// ctx.
func (d *Driver) MemAlloc(ctx Context, n int) (p uintptr, err error) {
	err = d.do(ctx, func() error {
		p, err = d.memAlloc(n)
		return err
	})
	return p, err
}

// MemFree frees what MemAlloc allocated.
func (d *Driver) MemFree(ctx Context, p uintptr) error {
	return d.do(ctx, func() error { return d.memFree(p) })
}

// CopyDtoD enqueues a device-to-device copy of n bytes on s.
func (d *Driver) CopyDtoD(ctx Context, s Stream, dst, src uintptr, n int) error {
	return d.do(ctx, func() error { return d.memcpyDtoD(dst, src, n, s) })
}
