package safego

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// logged collects what a Guard warns.
type logged struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logged) warn(msg string) {
	l.mu.Lock()
	l.msgs = append(l.msgs, msg)
	l.mu.Unlock()
}

func (l *logged) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.msgs, "\n")
}

// A panic on a goroutine started by Go reaches onPanic as a *Panic naming the site and
// the value, is logged at WARN with the stack of the panicking goroutine, and the
// WaitGroup is released; the test process lives on.
func TestGoRecoversIntoOnPanic(t *testing.T) {
	var log logged
	g := Guard{Warn: log.warn}
	var wg sync.WaitGroup
	got := make(chan error, 1)
	g.Go("worker", &wg, func(err error) { got <- err }, func() { explode() })
	wg.Wait()
	err := <-got
	var p *Panic
	require.True(t, errors.As(err, &p))
	require.True(t, errors.Is(err, ErrPanic))
	require.Equal(t, "worker", p.Site)
	require.Contains(t, err.Error(), "panic in gonccl's worker goroutine: boom")
	require.Contains(t, log.all(), "boom")
	require.Contains(t, log.all(), "explode", "the WARN log carries the panicking stack")
}

func explode() { panic("boom") }

// Run returns a panic as the unit's error; the caller's goroutine goes on.
func TestRunReturnsPanicAsError(t *testing.T) {
	var log logged
	g := Guard{Warn: log.warn}
	var s []int
	err := g.Run("unit", func() error { return fmt.Errorf("%d", s[3]) })
	require.ErrorIs(t, err, ErrPanic)
	require.Contains(t, err.Error(), "index out of range")
	require.NoError(t, g.Run("unit", func() error { return nil }))
	sentinel := errors.New("plain")
	require.Equal(t, sentinel, g.Run("unit", func() error { return sentinel }))
}

// Inject runs inside the recovered region, with the site's name: the test hook.
func TestInjectPanicsAtTheNamedSite(t *testing.T) {
	var sites []string
	var mu sync.Mutex
	g := Guard{Warn: func(string) {}, Inject: func(site string) {
		mu.Lock()
		sites = append(sites, site)
		mu.Unlock()
		if site == "b" {
			panic("injected")
		}
	}}
	require.NoError(t, g.Run("a", func() error { return nil }))
	ran := false
	err := g.Run("b", func() error { ran = true; return nil })
	require.ErrorIs(t, err, ErrPanic)
	require.False(t, ran, "f runs after the hook")
	var got error
	g.Func("b", func(err error) { got = err }, func() {})()
	require.ErrorIs(t, got, ErrPanic)
	require.Equal(t, []string{"a", "b", "b"}, sites)
}

// A handler that panics in turn is recovered too (and logged), and nil handlers and a
// nil Warn (stderr) are fine.
func TestPanickingHandlerIsContained(t *testing.T) {
	var log logged
	g := Guard{Warn: log.warn}
	var wg sync.WaitGroup
	g.Go("worker", &wg, func(error) { panic("handler broke") }, func() { panic("first") })
	wg.Wait()
	require.Contains(t, log.all(), "handler broke")
	Guard{}.Go("quiet", &wg, nil, func() { panic("to stderr") })
	wg.Wait()
}
