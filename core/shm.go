package core

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gonccl/gonccl/internal/safego"
	"github.com/gonccl/gonccl/transport"
	"github.com/gonccl/gonccl/transport/shm"
)

// connectShm replaces the collective link to every peer on this host with a
// shared-memory link, where both ranks allow it (GONCCL_SHM_DISABLE unset on both).
// The pair's TCP connection stays under the shm link as its liveness channel; the
// point-to-point connection is not touched. A pair where shared memory cannot be set
// up (see shm.ErrUnavailable) keeps TCP and says so in the log; any other failure
// fails init.
func connectShm(rank int, ranks []rankInfo, links []transport.Link, deadline time.Time, logs loggers, g safego.Guard) error {
	me := ranks[rank]
	var wg sync.WaitGroup
	errs := make([]error, len(ranks))
	for p, ri := range ranks {
		if p == rank || ri.Host != me.Host || !ri.Shm || !me.Shm {
			continue
		}
		sl, ok := links[p].(*transport.StreamLink)
		if !ok {
			continue
		}
		g.Go("shm setup", &wg, func(err error) { errs[p] = err }, func() {
			l, err := shm.Connect(sl.Conn(), p, rank < p, shm.DefaultRingSize, deadline, g)
			switch {
			case err == nil:
				links[p] = l
			case errors.Is(err, shm.ErrUnavailable):
				logs.shm.Warn(fmt.Sprintf("rank %d keeps tcp: %v", p, err))
			default:
				errs[p] = fmt.Errorf("setting up shared memory with rank %d: %w", p, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// transportName names the transport of link, for the INIT log.
func transportName(l transport.Link) string {
	if _, ok := l.(*shm.Link); ok {
		return "shm"
	}
	return "tcp"
}
