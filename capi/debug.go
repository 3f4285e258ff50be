package main

// #include "handles.h"
import "C"

import "runtime"

//export goncclDebugStats
func goncclDebugStats(goroutines, goHeapBytes, ncomms *C.int64_t) (res C.goncclResult_t) {
	defer guard(&res)
	if goroutines != nil {
		*goroutines = C.int64_t(runtime.NumGoroutine())
	}
	if goHeapBytes != nil {
		runtime.GC() // live bytes, not garbage awaiting collection
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		*goHeapBytes = C.int64_t(m.HeapAlloc)
	}
	if ncomms != nil {
		comms.Lock()
		*ncomms = C.int64_t(len(comms.m))
		comms.Unlock()
	}
	return C.goncclSuccess
}
