package core

import (
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/gonccl/gonccl/internal/termsig"
)

// SIGTERM is how torchrun (and most job launchers) ends the ranks that are left when
// one fails: often the very rank the others wait for. So that it still leaves its
// flight recorder for python -m gonccl.trace, every live communicator that has a
// GONCCL_TRACE_DUMP_DIR writes its recorder when the process gets SIGTERM, and the
// process then ends as SIGTERM's default action ends it.
//
// gonccl takes SIGTERM only if its action is the default one when the first such
// communicator is created (no handler of the host program's, not ignored: see package
// termsig), and then keeps it for the life of the process: giving it back
// (signal.Stop or Reset) would reinstall the default action over any handler the
// program installed in the meantime. A handler the program installs later replaces
// gonccl's, which then simply never runs.
var termDump struct {
	mu      sync.Mutex
	started bool // the watcher runs (it never stops)
	comms   map[*Comm]bool
}

// watchTerm adds c to the communicators whose recorders SIGTERM writes, starting the
// watcher if none runs yet and SIGTERM has its default action.
func (c *Comm) watchTerm() {
	if c.trace == nil || c.trace.dir == "" {
		return
	}
	termDump.mu.Lock()
	defer termDump.mu.Unlock()
	if !termDump.started {
		if !termsig.Default() {
			return
		}
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM)
		termDump.started = true
		go termWatcher(ch)
	}
	if termDump.comms == nil {
		termDump.comms = map[*Comm]bool{}
	}
	termDump.comms[c] = true
}

// unwatchTerm removes c (it ended: its recorder was written as it closed).
func (c *Comm) unwatchTerm() {
	termDump.mu.Lock()
	delete(termDump.comms, c)
	termDump.mu.Unlock()
}

// termWatcher waits for SIGTERM, writes every watched communicator's recorder, then
// ends the process with SIGTERM's default action.
func termWatcher(ch chan os.Signal) {
	<-ch
	termDump.mu.Lock()
	comms := make([]*Comm, 0, len(termDump.comms))
	for c := range termDump.comms {
		comms = append(comms, c)
	}
	termDump.mu.Unlock()
	for _, c := range comms {
		c.autoDump("SIGTERM")
	}
	signal.Reset(syscall.SIGTERM)
	_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
}
