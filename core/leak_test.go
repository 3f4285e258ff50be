package core

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
	"time"
)

// A goroutine-leak check with the standard library only: every goroutine's stack
// (runtime.Stack) before a test, compared with those still alive after it, given a
// grace period for goroutines that are on their way out (timers, links closing).

// allStacks returns every goroutine's stack, as runtime.Stack formats them.
func allStacks() string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return string(buf[:n])
		}
		buf = make([]byte, 2*len(buf))
	}
}

// goroutines maps each live goroutine's header ("goroutine 42") to its stack.
func goroutines() map[string]string {
	m := map[string]string{}
	for _, g := range strings.Split(allStacks(), "\n\n") {
		head, _, _ := strings.Cut(g, " [")
		if strings.HasPrefix(head, "goroutine ") {
			m[head] = g
		}
	}
	return m
}

// goroutineSnapshot records the goroutines alive now.
func goroutineSnapshot() map[string]bool {
	ids := map[string]bool{}
	for id := range goroutines() {
		ids[id] = true
	}
	return ids
}

// goroutinesSince waits until deadline for every goroutine started after before to
// end, and returns the stacks of those still alive then.
func goroutinesSince(before map[string]bool, deadline time.Time) []string {
	for {
		var left []string
		for id, stack := range goroutines() {
			if !before[id] && !isHarmless(stack) {
				left = append(left, stack)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// isHarmless reports goroutines the runtime or the testing package may start at any
// time.
func isHarmless(stack string) bool {
	for _, s := range []string{"testing.(*M).startAlarm", "testing.tRunner(", "runtime.ensureSigM", "os/signal.signal_recv"} {
		if strings.Contains(stack, s) {
			return true
		}
	}
	return false
}

// requireNoGoroutineLeak fails t if goroutines started after before are still alive
// after grace.
func requireNoGoroutineLeak(t *testing.T, before map[string]bool, grace time.Duration) {
	t.Helper()
	left := goroutinesSince(before, time.Now().Add(grace))
	if len(left) == 0 {
		return
	}
	var b bytes.Buffer
	for _, s := range left {
		b.WriteString(s)
		b.WriteString("\n\n")
	}
	t.Fatalf("%d goroutines left behind:\n%s", len(left), b.String())
}
