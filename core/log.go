package core

import (
	"fmt"
	"os"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/gonccl/gonccl/internal/logspec"
)

// loggers holds one logger per subsystem; a disabled subsystem gets a no-op logger.
type loggers struct {
	init, coll, net, shm, env, tune *zap.Logger
}

// newLoggers builds the loggers from GONCCL_DEBUG and GONCCL_DEBUG_SUBSYS, in the spirit
// of NCCL_DEBUG=INFO: one line per event on stderr, prefixed with host, pid and rank.
func newLoggers(cfg *config, host string, rank int) loggers {
	level := zapcore.WarnLevel
	switch logspec.ParseLevel(cfg.debug) {
	case logspec.Info:
		level = zapcore.InfoLevel
	case logspec.Trace:
		level = zapcore.DebugLevel
	}
	enc := zapcore.NewConsoleEncoder(zapcore.EncoderConfig{
		MessageKey:       "msg",
		LevelKey:         "level",
		NameKey:          "subsys",
		EncodeLevel:      zapcore.CapitalLevelEncoder,
		EncodeName:       zapcore.FullNameEncoder,
		ConsoleSeparator: " ",
	})
	core := zapcore.NewCore(enc, zapcore.Lock(os.Stderr), level)
	if cfg.test.logTee != nil {
		core = zapcore.NewTee(core, cfg.test.logTee)
	}
	base := zap.New(core).Named(fmt.Sprintf("%s:%d [%d] GONCCL", host, os.Getpid(), rank))
	enabled := logspec.Subsystems(cfg.debugSubsys)
	pick := func(name string) *zap.Logger {
		if !enabled(name) {
			return zap.NewNop()
		}
		return base.Named(name)
	}
	return loggers{init: pick("INIT"), coll: pick("COLL"), net: pick("NET"), shm: pick("SHM"), env: pick("ENV"), tune: pick("TUNING")}
}
