// Package logspec parses gonccl's two logging settings, GONCCL_DEBUG and
// GONCCL_DEBUG_SUBSYS, for every package that logs (core through zap, cuda with a
// line of its own), so that both read them the same way.
package logspec

import "strings"

// Level is how much gonccl logs.
type Level int

const (
	Warn  Level = iota // failures only (the default)
	Info               // plus one summary per communicator and per process
	Trace              // plus one line per operation
)

// ParseLevel reads GONCCL_DEBUG's value, in any case: INFO (or VERSION, as in NCCL)
// is Info, TRACE is Trace, anything else Warn.
func ParseLevel(s string) Level {
	switch strings.ToUpper(s) {
	case "INFO", "VERSION":
		return Info
	case "TRACE":
		return Trace
	}
	return Warn
}

// Subsystems reads GONCCL_DEBUG_SUBSYS's value, in any case: subsystem names separated
// by commas, ALL for every one, and a leading ^ to log all but those listed; empty is
// ALL. It returns whether the subsystem name logs.
func Subsystems(spec string) func(name string) bool {
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
