package route

import (
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// gatherGroup is an all-gather among n goroutines: each calls its member's Gather once
// per round.
type gatherGroup struct {
	mu    sync.Mutex
	cond  *sync.Cond
	n     int
	round int
	recs  [][]byte
	out   []byte
}

func newGatherGroup(n int) *gatherGroup {
	g := &gatherGroup{n: n, recs: make([][]byte, n)}
	g.cond = sync.NewCond(&g.mu)
	return g
}

func (g *gatherGroup) member(r int) Gather {
	return func(rec []byte) ([]byte, error) {
		g.mu.Lock()
		defer g.mu.Unlock()
		round := g.round
		g.recs[r] = rec
		filled := 0
		for _, x := range g.recs {
			if x != nil {
				filled++
			}
		}
		if filled == g.n {
			g.out = nil
			for _, x := range g.recs {
				g.out = append(g.out, x...)
			}
			g.recs = make([][]byte, g.n)
			g.round++
			g.cond.Broadcast()
		}
		for g.round == round {
			g.cond.Wait()
		}
		return append([]byte(nil), g.out...), nil
	}
}

// TestAgreeAllOrNothing: every rank learns the same verdict, and where one rank could
// not set a path up, every rank hears which one and why.
func TestAgreeAllOrNothing(t *testing.T) {
	for _, bad := range []int{-1, 0, 2} {
		const n = 3
		g := newGatherGroup(n)
		type verdict struct {
			all bool
			who string
		}
		got := make([]verdict, n)
		var wg sync.WaitGroup
		for r := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok, why := r != bad, ""
				if !ok {
					why = "opening rank 0's event: no such process"
				}
				all, who, err := Agree(g.member(r), ok, why)
				require.NoError(t, err)
				got[r] = verdict{all, who}
			}()
		}
		wg.Wait()
		for r := range n {
			require.Equal(t, got[0], got[r], "rank %d disagrees (bad rank %d)", r, bad)
		}
		if bad < 0 {
			require.True(t, got[0].all)
			continue
		}
		require.False(t, got[0].all)
		require.Equal(t, "rank "+string(rune('0'+bad))+" could not: opening rank 0's event: no such process", got[0].who)
	}
}

// TestAgreeRoundFails: a failed round is an error, not a verdict.
func TestAgreeRoundFails(t *testing.T) {
	boom := errors.New("peer lost")
	_, _, err := Agree(func([]byte) ([]byte, error) { return nil, boom }, true, "")
	require.ErrorIs(t, err, boom)
}

// TestExchangeRoundTrip: a record survives the exchange, a long reason cut to fit.
func TestExchangeRoundTrip(t *testing.T) {
	in := Record{OK: true, MPS: true, NVLink: true, Costs: 0xfeedface, Bus: "0000:10:00.0", Reason: string(make([]byte, 200))}
	recs, err := Exchange(func(b []byte) ([]byte, error) { return append(b, b...), nil }, in)
	require.NoError(t, err)
	require.Len(t, recs, 2)
	in.Reason = ""
	require.Equal(t, in, recs[1])
	_, err = Exchange(func(b []byte) ([]byte, error) { return b[1:], nil }, in)
	require.Error(t, err)
}
