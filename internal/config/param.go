package config

import (
	"go.uber.org/zap"

	"github.com/gonccl/gonccl/internal/cenv"
)

// Param is one setting that fills a configuration struct C: its environment variable,
// default, meaning, and how its value is parsed into a C.
type Param[C any] struct {
	Name string
	// Default is the value when unset, "" for none; Unset then says, for the docs,
	// what happens when it is unset.
	Default, Unset string
	// Help is docs/environment.md's text for it (Markdown).
	Help string
	// Parse checks the value (Default when unset) and stores it in c; name is Name, for
	// its messages. nil: read elsewhere, only echoed here.
	Parse func(c *C, name, v string) error
}

// Load parses every parameter, in order, into c: the variable's value as the C library
// sees it now, or its default when it is unset or empty. It returns "NAME=value" for
// each parameter the user set, in order (for Echo), or the first error a parser
// returns.
func Load[C any](params []Param[C], c *C) ([]string, error) {
	var set []string
	for _, p := range params {
		v, ok := cenv.Lookup(p.Name)
		if ok && v != "" {
			set = append(set, p.Name+"="+v)
		} else {
			v = p.Default
		}
		if p.Parse == nil {
			continue
		}
		if err := p.Parse(c, p.Name, v); err != nil {
			return nil, err
		}
	}
	return set, nil
}

// Echo logs each of set (what Load returned, plus any settings the caller adds) at
// INFO, one line each, as NCCL echoes the parameters it was given.
func Echo(log *zap.Logger, set []string) {
	for _, s := range set {
		log.Info(s)
	}
}
