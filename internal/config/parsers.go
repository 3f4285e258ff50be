package config

import (
	"fmt"
	"strconv"
)

// Parsers makes Param.Parse functions for the common kinds of setting of a C. Every
// error they return wraps Invalid, the caller's sentinel for a bad argument (core's
// ErrInvalidArgument), so that a bad setting is classified like any other bad argument.
type Parsers[C any] struct {
	Invalid error
}

// Text parses a free-form setting.
func (Parsers[C]) Text(set func(c *C, v string)) func(*C, string, string) error {
	return func(c *C, _, v string) error { set(c, v); return nil }
}

// ZeroOne parses a 0/1 setting.
func (p Parsers[C]) ZeroOne(set func(c *C, on bool)) func(*C, string, string) error {
	return func(c *C, name, v string) error {
		if v != "0" && v != "1" {
			return fmt.Errorf("%w: %s=%q: expected 0 or 1", p.Invalid, name, v)
		}
		set(c, v == "1")
		return nil
	}
}

// Integer parses an integer setting of at least least and, if most > 0, at most most;
// empty (no default) gives 0.
func (p Parsers[C]) Integer(least, most int64, set func(c *C, v int64)) func(*C, string, string) error {
	return func(c *C, name, s string) error {
		if s == "" {
			set(c, 0)
			return nil
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < least {
			return fmt.Errorf("%w: %s=%q is not an integer >= %d", p.Invalid, name, s, least)
		}
		if most > 0 && v > most {
			return fmt.Errorf("%w: %s=%d: at most %d", p.Invalid, name, v, most)
		}
		set(c, v)
		return nil
	}
}
