package cuda

import (
	"fmt"
	"os"
	"sync"

	"github.com/gonccl/gonccl/internal/cenv"
	"github.com/gonccl/gonccl/internal/logspec"
)

var logMu sync.Mutex

// logInfo writes one INIT line at INFO, in the format of core's log, when GONCCL_DEBUG
// asks for INFO or more and GONCCL_DEBUG_SUBSYS does not exclude INIT. Only the
// once-per-process load decision is logged here, so a logger of its own is not needed.
func logInfo(msg string) {
	level, _ := cenv.Lookup("GONCCL_DEBUG")
	subsys, _ := cenv.Lookup("GONCCL_DEBUG_SUBSYS")
	if logspec.ParseLevel(level) < logspec.Info || !logspec.Subsystems(subsys)("INIT") {
		return
	}
	host, _ := os.Hostname()
	logMu.Lock()
	defer logMu.Unlock()
	fmt.Fprintf(os.Stderr, "INFO %s:%d GONCCL.INIT %s\n", host, os.Getpid(), msg)
}
