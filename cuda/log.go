package cuda

import (
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/gonccl/gonccl/internal/cenv"
)

var logMu sync.Mutex

// logInfo writes one INIT line at INFO, in the format of core's log, when GONCCL_DEBUG
// asks for INFO or more and GONCCL_DEBUG_SUBSYS does not exclude INIT. Only the
// once-per-process load decision is logged here, so a logger of its own is not needed.
func logInfo(msg string) {
	level, _ := cenv.Lookup("GONCCL_DEBUG")
	switch strings.ToUpper(level) {
	case "INFO", "VERSION", "TRACE":
	default:
		return
	}
	subsys, _ := cenv.Lookup("GONCCL_DEBUG_SUBSYS")
	if !subsysEnabled(strings.ToUpper(subsys), "INIT") {
		return
	}
	host, _ := os.Hostname()
	logMu.Lock()
	defer logMu.Unlock()
	fmt.Fprintf(os.Stderr, "INFO %s:%d GONCCL.INIT %s\n", host, os.Getpid(), msg)
}

func subsysEnabled(spec, name string) bool {
	if spec == "" {
		return true
	}
	exclude := strings.HasPrefix(spec, "^")
	hit := false
	for _, s := range strings.Split(strings.TrimPrefix(spec, "^"), ",") {
		s = strings.TrimSpace(s)
		hit = hit || s == name || s == "ALL"
	}
	return hit != exclude
}
