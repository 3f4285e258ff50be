package core

import (
	"fmt"
	"os"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// loggers holds one logger per subsystem; a disabled subsystem gets a no-op logger.
type loggers struct {
	init, coll, net, shm, env, tune *zap.Logger
}

// logTee, when set (by tests), also receives every log entry.
var logTee zapcore.Core

// newLoggers builds the loggers from GONCCL_DEBUG and GONCCL_DEBUG_SUBSYS, in the spirit
// of NCCL_DEBUG=INFO: one line per event on stderr, prefixed with host, pid and rank.
func newLoggers(cfg *config, host string, rank int) loggers {
	level := zapcore.WarnLevel
	switch cfg.debug {
	case "INFO", "VERSION":
		level = zapcore.InfoLevel
	case "TRACE":
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
	if logTee != nil {
		core = zapcore.NewTee(core, logTee)
	}
	base := zap.New(core).Named(fmt.Sprintf("%s:%d [%d] GONCCL", host, os.Getpid(), rank))
	enabled := parseSubsys(cfg.debugSubsys)
	pick := func(name string) *zap.Logger {
		if !enabled(name) {
			return zap.NewNop()
		}
		return base.Named(name)
	}
	return loggers{init: pick("INIT"), coll: pick("COLL"), net: pick("NET"), shm: pick("SHM"), env: pick("ENV"), tune: pick("TUNING")}
}

// parseSubsys returns whether a subsystem is enabled under spec ("ALL", "INIT,NET",
// "^COLL").
func parseSubsys(spec string) func(string) bool {
	exclude := strings.HasPrefix(spec, "^")
	spec = strings.TrimPrefix(spec, "^")
	set := map[string]bool{}
	for _, s := range strings.Split(spec, ",") {
		set[strings.TrimSpace(s)] = true
	}
	return func(name string) bool {
		hit := set[name] || set["ALL"]
		return hit != exclude
	}
}
