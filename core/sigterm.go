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
// gonccl takes SIGTERM only while its action is the default one (no handler of the
// host program's, not ignored: see package termsig), and gives it back (signal.Reset,
// which restores that default) when the last such communicator ends.
var termDump struct {
	start sync.Mutex // serializes starting and stopping the watcher
	mu    sync.Mutex // guards comms
	comms map[*Comm]bool
	stop  chan struct{} // closed to stop the watcher
	done  chan struct{} // closed when the watcher has returned
}

// watchTerm adds c to the communicators whose recorders SIGTERM writes, starting the
// watcher if c is the first (and SIGTERM has its default action).
func (c *Comm) watchTerm() {
	if c.trace == nil || c.trace.dir == "" {
		return
	}
	termDump.start.Lock()
	defer termDump.start.Unlock()
	termDump.mu.Lock()
	running := len(termDump.comms) > 0
	termDump.mu.Unlock()
	if !running {
		if !termsig.Default() {
			return
		}
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM)
		termDump.stop, termDump.done = make(chan struct{}), make(chan struct{})
		go termWatcher(ch, termDump.stop, termDump.done)
	}
	termDump.mu.Lock()
	if termDump.comms == nil {
		termDump.comms = map[*Comm]bool{}
	}
	termDump.comms[c] = true
	termDump.mu.Unlock()
}

// unwatchTerm removes c, stopping the watcher (and giving SIGTERM back) after the last.
func (c *Comm) unwatchTerm() {
	termDump.start.Lock()
	defer termDump.start.Unlock()
	termDump.mu.Lock()
	_, ok := termDump.comms[c]
	delete(termDump.comms, c)
	last := ok && len(termDump.comms) == 0
	termDump.mu.Unlock()
	if last {
		close(termDump.stop)
		<-termDump.done
	}
}

// termWatcher waits for SIGTERM or stop. On SIGTERM it writes every watched
// communicator's recorder, then ends the process with SIGTERM's default action.
func termWatcher(ch chan os.Signal, stop, done chan struct{}) {
	defer close(done)
	select {
	case <-stop:
		signal.Stop(ch)
		signal.Reset(syscall.SIGTERM)
		return
	case <-ch:
	}
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
