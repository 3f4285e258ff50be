package main

// #include "handles.h"
import "C"

import (
	"fmt"
	"runtime"
	"strings"
	"unsafe"

	"github.com/gonccl/gonccl/core"
)

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

//export goncclDebugHops
func goncclDebugHops(buf *C.char, n C.size_t, reset C.int, needed *C.size_t) (res C.goncclResult_t) {
	defer guard(&res)
	var b strings.Builder
	for _, h := range core.HopStats(reset != 0) {
		fmt.Fprintf(&b, "%s\t%d\t%d\n", h.Hop, h.Count, h.Total.Nanoseconds())
	}
	text := b.String()
	if needed != nil {
		*needed = C.size_t(len(text) + 1)
	}
	if buf != nil && n > 0 {
		out := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))
		k := copy(out[:n-1], text)
		out[k] = 0
	}
	return C.goncclSuccess
}
