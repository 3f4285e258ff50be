package core

import (
	"fmt"
	"strconv"
	"strings"

	settings "github.com/gonccl/gonccl/internal/config"
	"github.com/gonccl/gonccl/transport/tcp"
)

// The parsers of Params' rows that no kind in settings.Parsers covers. Each refuses a
// value with a *settings.SettingError naming the variable, the value and what it takes.

// parseSubsys reads GONCCL_DEBUG_SUBSYS.
func parseSubsys(c *config, name, v string) error {
	if unknown, ok := settings.CheckSubsystems(v); !ok {
		return &settings.SettingError{Name: name, Value: v, Invalid: ErrInvalidArgument,
			Want: fmt.Sprintf("names of %s or ALL, comma-separated, optionally led by ^ (%s is none of them)",
				strings.Join(settings.Subsystems, ", "), unknown)}
	}
	c.debugSubsys = strings.ToUpper(v)
	return nil
}

// parseDebugFile reads GONCCL_DEBUG_FILE.
func parseDebugFile(c *config, name, v string) error {
	if err := settings.CheckDebugFile(v); err != nil {
		return &settings.SettingError{Name: name, Value: v, Invalid: ErrInvalidArgument,
			Want: fmt.Sprintf("a file name, in which %%h stands for the host name, %%p for the process id and %%%% for a percent sign (%v)", err)}
	}
	c.debugFile = v
	return nil
}

// parsePortRange reads GONCCL_PORT_RANGE: "lo-hi", 1 <= lo <= hi <= 65535.
func parsePortRange(c *config, name, v string) error {
	v = strings.TrimSpace(v)
	if v == "" {
		return nil
	}
	los, his, ok := strings.Cut(v, "-")
	lo, err1 := strconv.Atoi(strings.TrimSpace(los))
	hi, err2 := strconv.Atoi(strings.TrimSpace(his))
	if !ok || err1 != nil || err2 != nil || lo < 1 || hi > 65535 || lo > hi {
		return &settings.SettingError{Name: name, Value: v, Invalid: ErrInvalidArgument,
			Want: "two port numbers lo-hi with 1 <= lo <= hi <= 65535, e.g. 29500-29599"}
	}
	c.portRange = tcp.PortRange{Lo: lo, Hi: hi}
	return nil
}

// parseCostSyntax checks GONCCL_DEVICE_PATH_COST's form, key=number pairs separated
// by commas, and keeps it for package route, which knows the keys and checks them when
// a communicator is created (internal/devroute).
func parseCostSyntax(c *config, name, v string) error {
	for _, item := range strings.Split(v, ",") {
		if strings.TrimSpace(item) == "" {
			continue
		}
		key, val, ok := strings.Cut(item, "=")
		f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if !ok || strings.TrimSpace(key) == "" || err != nil || f < 0 {
			return &settings.SettingError{Name: name, Value: v, Invalid: ErrInvalidArgument,
				Want: "key=value pairs, comma-separated, each value a number of at least 0 (e.g. staged.latency=300,samegpu.busbw=400; keys: docs/gpu.md, how auto chooses)"}
		}
	}
	c.device.PathCost = v
	return nil
}

// checkTLSFiles names every file GONCCL_TLS=1 needs that is not set, all at once.
func checkTLSFiles(c *config) error {
	var missing []string
	for _, f := range []struct{ name, path string }{
		{"GONCCL_TLS_CERT", c.tlsCert}, {"GONCCL_TLS_KEY", c.tlsKey}, {"GONCCL_TLS_CA", c.tlsCA},
	} {
		if f.path == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return invalidSetting(fmt.Sprintf("GONCCL_TLS=1 needs three PEM files: GONCCL_TLS_CERT (this rank's certificate), "+
		"GONCCL_TLS_KEY (its private key) and GONCCL_TLS_CA (the CA bundle that signed every rank's certificate); "+
		"not set: %s (see docs/security.md)", settings.JoinWords(missing, "and")))
}

// settingProblem is a setting that cannot work as set, in words that say so and what
// to do; it matches ErrInvalidArgument without that sentinel's words in the message.
type settingProblem string

func (e settingProblem) Error() string { return string(e) }
func (e settingProblem) Unwrap() error { return ErrInvalidArgument }

func invalidSetting(msg string) error { return settingProblem(msg) }
