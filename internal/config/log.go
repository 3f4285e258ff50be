package config

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"

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

// Logging is what the settings say about logging: GONCCL_DEBUG's value (Level),
// GONCCL_DEBUG_SUBSYS's (Subsys) and GONCCL_DEBUG_FILE's (File, "" for stderr).
type Logging struct {
	Level, Subsys, File string
}

// Levels are GONCCL_DEBUG's values, least first.
var Levels = []string{"WARN", "INFO", "TRACE"}

// Subsystems are the names GONCCL_DEBUG_SUBSYS takes (besides ALL).
var Subsystems = []string{"INIT", "COLL", "NET", "SHM", "ENV", "TUNING"}

// Loggers returns the logger of each subsystem for the settings l, in the spirit of
// NCCL_DEBUG=INFO: one line per event,
//
//	2026-11-27T21:30:01.123456Z host:pid:tid [rank] GONCCL LEVEL SUBSYSTEM message
//
// (no "[rank]" when who.Rank < 0; tid is the OS thread that logged), on stderr or in
// the file l.File names (see DebugFile). A subsystem that l.Subsys excludes gets a
// no-op logger. tee, if not nil, also receives every entry (tests; its entries are
// named by the subsystem). Core and cuda both log through it, so both read the
// settings the same way.
func Loggers(l Logging, who Who, tee zapcore.Core) func(subsystem string) *zap.Logger {
	threshold := zapcore.WarnLevel
	switch strings.ToUpper(strings.TrimSpace(l.Level)) {
	case "INFO":
		threshold = zapcore.InfoLevel
	case "TRACE":
		threshold = zapcore.DebugLevel
	}
	out, fileErr := debugOutput(l.File, who)
	core := zapcore.NewCore(newLineEncoder(who), out, threshold)
	if tee != nil {
		core = zapcore.NewTee(core, tee)
	}
	base := zap.New(core)
	if fileErr != nil && firstFileError(fileErr.Error()) {
		base.Named("INIT").Warn(fileErr.Error() + "; logging to stderr instead")
	}
	enabled := subsystems(l.Subsys)
	return func(subsystem string) *zap.Logger {
		if !enabled(subsystem) {
			return zap.NewNop()
		}
		return base.Named(subsystem)
	}
}

// debugFiles holds the files GONCCL_DEBUG_FILE opened, by path: each is opened once
// per process, appended to by every communicator, and never closed (as NCCL keeps
// its debug file), so that lines written at exit still land.
var debugFiles = struct {
	sync.Mutex
	byPath map[string]zapcore.WriteSyncer
}{byPath: map[string]zapcore.WriteSyncer{}}

// fileErrors holds the GONCCL_DEBUG_FILE errors already logged: each is logged once per
// process, not once per communicator and per package that logs.
var fileErrors = struct {
	sync.Mutex
	seen map[string]bool
}{seen: map[string]bool{}}

func firstFileError(text string) bool {
	fileErrors.Lock()
	defer fileErrors.Unlock()
	if fileErrors.seen[text] {
		return false
	}
	fileErrors.seen[text] = true
	return true
}

// debugOutput is where log lines go: stderr when pattern is "", else the file it
// names for who (see DebugFile); stderr and an error when that file cannot be opened.
func debugOutput(pattern string, who Who) (zapcore.WriteSyncer, error) {
	stderr := zapcore.Lock(os.Stderr)
	if pattern == "" {
		return stderr, nil
	}
	path := DebugFile(pattern, who.Host, who.Pid)
	debugFiles.Lock()
	defer debugFiles.Unlock()
	if w, ok := debugFiles.byPath[path]; ok {
		return w, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return stderr, fmt.Errorf("GONCCL_DEBUG_FILE=%q: %v", pattern, err)
	}
	w := zapcore.Lock(zapcore.AddSync(io.Writer(f)))
	debugFiles.byPath[path] = w
	return w, nil
}

// DebugFile is the file GONCCL_DEBUG_FILE's pattern names for a process, as NCCL_DEBUG_FILE's
// does: %h is the host name, %p the process id, %% a percent sign.
func DebugFile(pattern, host string, pid int) string {
	var b strings.Builder
	for i := 0; i < len(pattern); i++ {
		if pattern[i] != '%' || i+1 == len(pattern) {
			b.WriteByte(pattern[i])
			continue
		}
		i++
		switch pattern[i] {
		case 'h':
			b.WriteString(host)
		case 'p':
			b.WriteString(strconv.Itoa(pid))
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(pattern[i])
		}
	}
	return b.String()
}

// CheckDebugFile checks GONCCL_DEBUG_FILE's pattern: a % takes h, p or % after it.
func CheckDebugFile(pattern string) error {
	for i := 0; i < len(pattern); i++ {
		if pattern[i] != '%' {
			continue
		}
		if i+1 == len(pattern) || !strings.ContainsRune("hp%", rune(pattern[i+1])) {
			return fmt.Errorf("%%%s is not a pattern", pattern[i+1:min(i+2, len(pattern))])
		}
		i++
	}
	return nil
}

// CheckSubsystems checks GONCCL_DEBUG_SUBSYS's value: names of Subsystems or ALL,
// comma-separated, in any case, the list optionally led by ^; it returns the first
// name it does not know.
func CheckSubsystems(spec string) (unknown string, ok bool) {
	spec = strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(spec)), "^")
	for _, s := range strings.Split(spec, ",") {
		s = strings.TrimSpace(s)
		if s == "" || s == "ALL" {
			continue
		}
		known := false
		for _, k := range Subsystems {
			known = known || s == k
		}
		if !known {
			return s, false
		}
	}
	return "", true
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
