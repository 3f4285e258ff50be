package main

// #include <pthread.h>
// #include "handles.h"
// static unsigned long long goncclThreadID(void) { return (unsigned long long)pthread_self(); }
import "C"

import (
	"fmt"
	"sync"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/internal/devroute"
)

// Groups. gonccl starts every operation as soon as it is called: collectives queue in
// issue order on their communicator's executor, and point-to-point messages progress on
// channels of their own, so no order of calls inside a group can deadlock and nothing
// has to be held back until goncclGroupEnd. The one thing a group changes is that the
// blocking goncclSend and goncclRecv do not wait inside it: they join the calling
// thread's group, and the outermost goncclGroupEnd waits for them all (a ring of
// blocking sends of large messages would otherwise wait for receives not yet called).
// Blocking collectives still wait where they are called; every rank reaches them in
// the same order, and they do not depend on point-to-point progress. The exception to
// "starts at once": the device path's blocking sends and receives, which a group holds
// until its end and then enqueues together (internal/devroute/devp2p.go), as NCCL does.
//
// Nesting is per thread, as in NCCL. An exported function runs on the C caller's
// thread, so pthread_self identifies the thread a group belongs to.

type groupMember struct {
	req  *core.Request
	comm *commEntry
}

type group struct {
	depth   int
	members []groupMember
	held    devroute.Group // device-path sends and receives, enqueued at the end
}

var groups = struct {
	sync.Mutex
	m map[uint64]*group
}{m: map[uint64]*group{}}

func threadID() uint64 { return uint64(C.goncclThreadID()) }

// currentGroup is the calling thread's open group's holder of device-path sends and
// receives (nil: no group is open).
func currentGroup() *devroute.Group {
	groups.Lock()
	defer groups.Unlock()
	if g := groups.m[threadID()]; g != nil {
		return &g.held
	}
	return nil
}

// joinGroup adds req to the calling thread's open group and reports whether there was
// one.
func joinGroup(req *core.Request, e *commEntry) bool {
	groups.Lock()
	defer groups.Unlock()
	g := groups.m[threadID()]
	if g == nil {
		return false
	}
	g.members = append(g.members, groupMember{req, e})
	return true
}

//export goncclGroupStart
func goncclGroupStart() (res C.goncclResult_t) {
	defer guard(&res)
	id := threadID()
	groups.Lock()
	g := groups.m[id]
	if g == nil {
		g = &group{}
		groups.m[id] = g
	}
	g.depth++
	groups.Unlock()
	return C.goncclSuccess
}

//export goncclGroupEnd
func goncclGroupEnd() (res C.goncclResult_t) {
	defer guard(&res)
	id := threadID()
	groups.Lock()
	g := groups.m[id]
	if g == nil {
		groups.Unlock()
		return fail(nil, fmt.Errorf("%w: goncclGroupEnd without goncclGroupStart on this thread", errUsage))
	}
	g.depth--
	if g.depth > 0 {
		groups.Unlock()
		return C.goncclSuccess
	}
	delete(groups.m, id)
	groups.Unlock()
	g.held.Flush()
	res = C.goncclSuccess
	for _, m := range g.members {
		if _, err := m.req.Wait(-1); err != nil && res == C.goncclSuccess {
			res = fail(m.comm, err)
		}
	}
	return res
}
