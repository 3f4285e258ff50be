package config

import (
	"os"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Who is where a log line comes from: host and pid, and the rank (Rank < 0: none,
// for a process-wide line).
type Who struct {
	Host string
	Pid  int
	Rank int
}

// Loggers returns the logger of each subsystem for GONCCL_DEBUG's value level and
// GONCCL_DEBUG_SUBSYS's value subsys, in the spirit of NCCL_DEBUG=INFO: one line per
// event on stderr,
//
//	2026-11-27T21:30:01.123456Z host:pid:tid [rank] GONCCL LEVEL SUBSYSTEM message
//
// (no "[rank]" when who.Rank < 0; tid is the OS thread that logged). A subsystem that
// subsys excludes gets a no-op logger. tee, if not nil, also receives every entry
// (tests; its entries are named by the subsystem). Core and cuda both log through it,
// so both read the two settings the same way.
func Loggers(level, subsys string, who Who, tee zapcore.Core) func(subsystem string) *zap.Logger {
	threshold := zapcore.WarnLevel
	switch parseLevel(level) {
	case levelInfo:
		threshold = zapcore.InfoLevel
	case levelTrace:
		threshold = zapcore.DebugLevel
	}
	core := zapcore.NewCore(newLineEncoder(who), zapcore.Lock(os.Stderr), threshold)
	if tee != nil {
		core = zapcore.NewTee(core, tee)
	}
	base := zap.New(core)
	enabled := subsystems(subsys)
	return func(subsystem string) *zap.Logger {
		if !enabled(subsystem) {
			return zap.NewNop()
		}
		return base.Named(subsystem)
	}
}

// level is how much gonccl logs.
type level int

const (
	levelWarn  level = iota // failures only (the default)
	levelInfo               // plus one summary per communicator and per process
	levelTrace              // plus one line per operation
)

// parseLevel reads GONCCL_DEBUG's value, in any case: INFO (or VERSION, as in NCCL)
// is levelInfo, TRACE is levelTrace, anything else levelWarn.
func parseLevel(s string) level {
	switch strings.ToUpper(s) {
	case "INFO", "VERSION":
		return levelInfo
	case "TRACE":
		return levelTrace
	}
	return levelWarn
}

// subsystems reads GONCCL_DEBUG_SUBSYS's value, in any case: subsystem names separated
// by commas, ALL for every one, and a leading ^ to log all but those listed; empty is
// ALL. It returns whether the subsystem name logs.
func subsystems(spec string) func(name string) bool {
	spec = strings.ToUpper(strings.TrimSpace(spec))
	if spec == "" {
		spec = "ALL"
	}
	exclude := strings.HasPrefix(spec, "^")
	set := map[string]bool{}
	for _, s := range strings.Split(strings.TrimPrefix(spec, "^"), ",") {
		set[strings.TrimSpace(s)] = true
	}
	return func(name string) bool {
		return (set[name] || set["ALL"]) != exclude
	}
}
