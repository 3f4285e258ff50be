package cuda

// Device memory entry points for the fake driver's own tests (ipc_test.go).

// MemAllocIn allocates n bytes of device memory in ctx.
func (d *Driver) MemAllocIn(ctx Context, n int) (p uintptr, err error) {
	err = d.do(ctx, func() error { p, err = d.memAlloc(n); return err })
	return p, err
}

// MemFreeIn frees device memory in ctx.
func (d *Driver) MemFreeIn(ctx Context, p uintptr) error {
	return d.do(ctx, func() error { return d.memFree(p) })
}

// CopyDtoDIn enqueues a device-to-device copy on s in ctx.
func (d *Driver) CopyDtoDIn(ctx Context, s Stream, dst, src uintptr, n int) error {
	return d.do(ctx, func() error { return d.memcpyDtoD(dst, src, n, s) })
}

// IpcRoundTripIn exports p and opens the handle in ctx (in this process).
func (d *Driver) IpcRoundTripIn(ctx Context, p uintptr) error {
	return d.do(ctx, func() error {
		h, err := d.ipcGetMemHandle(p)
		if err != nil {
			return err
		}
		_, err = d.ipcOpenMemHandle(h)
		return err
	})
}
