package core

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	settings "github.com/gonccl/gonccl/internal/config"
)

// knownVariables are the names a GONCCL_* variable may have without being reported as
// unknown: the settings (Params), the build-time ones (outsideParams) and toolVariables.
// Suggestions for a misspelt name come from the first two.
func knownVariables() []string {
	var names []string
	for _, p := range Params {
		names = append(names, p.Name)
	}
	for _, p := range outsideParams {
		names = append(names, p.Name)
	}
	return append(names, toolVariables...)
}

// unknownSettingsError is GONCCL_UNKNOWN_ENV=error's refusal of the unknown names.
func unknownSettingsError(unknown []settings.Unknown) error {
	hints := make([]string, len(unknown))
	for i, u := range unknown {
		hints[i] = u.Hint()
	}
	return invalidSetting(strings.Join(hints, "; ") +
		" (GONCCL_UNKNOWN_ENV=error refuses unknown GONCCL_* variables: fix or unset them; docs/environment.md lists every setting)")
}

// warned holds the warnings about settings already given in this process: each is
// given once, not once per communicator.
var warned = struct {
	sync.Mutex
	keys map[string]bool
}{keys: map[string]bool{}}

// warnOnce logs msg at WARN unless a warning of the same key was logged in this process.
func warnOnce(log *zap.Logger, key, msg string) {
	warned.Lock()
	defer warned.Unlock()
	if !warned.keys[key] {
		warned.keys[key] = true
		log.Warn(msg)
	}
}

// warnUnknown logs, at WARN, each unknown GONCCL_* variable not yet named in this
// process, with the closest known name.
func warnUnknown(log *zap.Logger, unknown []settings.Unknown) {
	for _, u := range unknown {
		warnOnce(log, "unknown "+u.Name,
			u.Hint()+": it is ignored (GONCCL_UNKNOWN_ENV=error makes this an error; docs/environment.md lists every setting)")
	}
}

// warnTimeoutUnused says, once per process, that GONCCL_TIMEOUT_MS is set but the
// caller gave the communicator a timeout of its own (torch always does), which wins.
func warnTimeoutUnused(log *zap.Logger, set []string, given time.Duration) {
	for _, s := range set {
		if v, ok := strings.CutPrefix(s, "GONCCL_TIMEOUT_MS="); ok {
			warnOnce(log, "timeout", fmt.Sprintf("GONCCL_TIMEOUT_MS=%s does not apply: the caller gave this communicator a timeout of %d ms, "+
				"which governs its init and operations (under torch: the timeout= of init_process_group or new_group); "+
				"GONCCL_TIMEOUT_MS is the timeout of C callers that give none", v, given.Milliseconds()))
		}
	}
}
