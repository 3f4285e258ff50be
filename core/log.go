package core

import (
	"os"

	"go.uber.org/zap"

	settings "github.com/gonccl/gonccl/internal/config"
)

// loggers holds one logger per subsystem; a disabled subsystem gets a no-op logger.
type loggers struct {
	init, coll, net, shm, env, tune *zap.Logger
}

// newLoggers builds the loggers from GONCCL_DEBUG and GONCCL_DEBUG_SUBSYS (see
// settings.Loggers): one line per event on stderr (or GONCCL_DEBUG_FILE), prefixed with the time, host, pid, thread and rank.
func newLoggers(cfg *config, host string, rank int) loggers {
	pick := settings.Loggers(settings.Logging{Level: cfg.debug, Subsys: cfg.debugSubsys, File: cfg.debugFile}, settings.Who{Host: host, Pid: os.Getpid(), Rank: rank}, cfg.test.logTee)
	return loggers{init: pick("INIT"), coll: pick("COLL"), net: pick("NET"), shm: pick("SHM"), env: pick("ENV"), tune: pick("TUNING")}
}
