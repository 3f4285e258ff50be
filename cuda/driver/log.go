package driver

import (
	"os"

	"github.com/gonccl/gonccl/internal/cenv"
	settings "github.com/gonccl/gonccl/internal/config"
)

// LogInfo writes one INIT line at INFO through core's loggers (settings.Loggers), when
// GONCCL_DEBUG asks for INFO or more and GONCCL_DEBUG_SUBSYS does not exclude INIT.
// Only the once-per-process load decision is logged here, so it builds its logger on
// the spot, named like core's without a rank.
func LogInfo(msg string) {
	level, _ := cenv.Lookup("GONCCL_DEBUG")
	subsys, _ := cenv.Lookup("GONCCL_DEBUG_SUBSYS")
	file, _ := cenv.Lookup("GONCCL_DEBUG_FILE")
	host, _ := os.Hostname()
	settings.Loggers(settings.Logging{Level: level, Subsys: subsys, File: file}, settings.Who{Host: host, Pid: os.Getpid(), Rank: -1}, nil)("INIT").Info(msg)
}
