package core

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// initAll creates an n-rank communicator over real TCP sockets, one goroutine per rank.
func initAll(t *testing.T, n int) []*Comm {
	t.Helper()
	return initAllTimeout(t, n, 10*time.Second)
}

// initAllTimeout is initAll with the communicator's operation timeout.
func initAllTimeout(t *testing.T, n int, timeout time.Duration) []*Comm {
	t.Helper()
	id, err := NewUniqueID()
	require.NoError(t, err)
	comms := make([]*Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], errs[r] = NewComm(id, n, r, Options{Timeout: timeout})
		}()
	}
	wg.Wait()
	for r := 0; r < n; r++ {
		require.NoError(t, errs[r], "rank %d", r)
	}
	return comms
}

func TestBootstrapOverTCP(t *testing.T) {
	for _, n := range []int{1, 2, 4} {
		comms := initAll(t, n)
		count := 100003
		ins := make([][]byte, n)
		outs := make([][]byte, n)
		for r := range ins {
			ins[r] = inputs(Float32, Sum, count, r, 1)
			outs[r] = make([]byte, len(ins[r]))
		}
		errs := onAll(t, comms, func(c *Comm) (*Request, error) {
			return c.AllReduce(ins[c.rank], outs[c.rank], count, Float32, Sum)
		})
		want := reference(Float32, Sum, ins, count)
		for r := range comms {
			require.NoError(t, errs[r])
			require.Equal(t, want, outs[r])
			require.NoError(t, comms[r].Destroy())
		}
	}
}

func TestBootstrapIgnoresStrangers(t *testing.T) {
	id, err := NewUniqueID()
	require.NoError(t, err)
	addr, err := id.rootAddr()
	require.NoError(t, err)
	// A stranger connects to the root first and sends garbage; the job still forms.
	s, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	_, _ = s.Write([]byte("hello, I am not a gonccl rank at all........"))
	defer s.Close()

	comms := make([]*Comm, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], errs[r] = NewComm(id, 2, r, Options{Timeout: 10 * time.Second})
		}()
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	for _, c := range comms {
		require.NoError(t, c.Destroy())
	}
}

func TestInitTimesOutWhenARankIsMissing(t *testing.T) {
	id, err := NewUniqueID()
	require.NoError(t, err)
	start := time.Now()
	_, err = NewComm(id, 2, 0, Options{Timeout: 300 * time.Millisecond})
	require.ErrorIs(t, err, ErrTimeout)
	require.ErrorContains(t, err, "rank 0 of 2")
	require.Less(t, time.Since(start), 5*time.Second)
}

func TestUniqueIDRejectsGarbage(t *testing.T) {
	var id UniqueID
	_, err := NewComm(id, 2, 0, Options{Timeout: time.Second})
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorContains(t, err, "not a gonccl unique id")
}
