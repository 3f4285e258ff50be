package devroute

// devSettings are the router's GONCCL_DEVICE_* and GONCCL_STAGED_* settings, each
// parsed once, when a communicator is created (the settings registry has checked
// their form at init already). A value that cannot be read is kept as its error,
// which the first operation that needs it returns.
type devSettings struct {
	scratch    int // GONCCL_DEVICE_SCRATCH
	scratchErr error
	ringFrom   int // GONCCL_DEVICE_RING_THRESHOLD
	ringErr    error
	chunk      int  // GONCCL_STAGED_CHUNK
	chunkSet   bool // asked for by name
	chunkErr   error
	pinned     int // GONCCL_STAGED_PINNED
	pinnedErr  error
	reduceGPU  bool // GONCCL_STAGED_REDUCE
	reduceErr  error
}

func readSettings() devSettings {
	var s devSettings
	s.scratch, s.scratchErr = devScratch()
	s.ringFrom, s.ringErr = devRingFrom()
	s.chunk, s.chunkSet, s.chunkErr = stagedChunkSetting()
	s.pinned, s.pinnedErr = stagedPinned()
	s.reduceGPU, s.reduceErr = stagedReduceOnGPU()
	return s
}
