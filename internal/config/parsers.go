package config

import (
	"fmt"
	"strconv"
	"strings"
)

// Parsers makes Param.Parse functions for the common kinds of setting of a C. Every
// error they return is a *SettingError wrapping Invalid, the caller's sentinel for a
// bad argument (core's ErrInvalidArgument), so that a bad setting is classified like
// any other bad argument.
//
// A set function may be nil: the value is then only checked here (at init, with every
// other setting) and read where it is used.
type Parsers[C any] struct {
	Invalid error
}

// SettingError is a value a parser refused: it names the variable, the value and
// the values it takes, and how to recover.
type SettingError struct {
	Name, Value string
	// Want says which values the setting takes ("WARN, INFO or TRACE").
	Want string
	// Invalid is the sentinel it matches (Parsers.Invalid).
	Invalid error
}

func (e *SettingError) Error() string {
	return fmt.Sprintf("%s=%q is not a valid setting: it takes %s; unset it for the default", e.Name, e.Value, e.Want)
}

// Unwrap returns the sentinel, so that errors.Is classifies the error.
func (e *SettingError) Unwrap() error { return e.Invalid }

func (p Parsers[C]) refuse(name, v, want string) error {
	return &SettingError{Name: name, Value: v, Want: want, Invalid: p.Invalid}
}

// Text parses a free-form setting.
func (Parsers[C]) Text(set func(c *C, v string)) func(*C, string, string) error {
	return func(c *C, _, v string) error {
		if set != nil {
			set(c, v)
		}
		return nil
	}
}

// ZeroOne parses a 0/1 setting.
func (p Parsers[C]) ZeroOne(set func(c *C, on bool)) func(*C, string, string) error {
	return func(c *C, name, v string) error {
		if v != "0" && v != "1" {
			return p.refuse(name, v, "0 or 1")
		}
		if set != nil {
			set(c, v == "1")
		}
		return nil
	}
}

// OneOf parses a setting that takes one of allowed, in any case; set gets the allowed
// spelling.
func (p Parsers[C]) OneOf(allowed []string, set func(c *C, v string)) func(*C, string, string) error {
	return func(c *C, name, v string) error {
		for _, a := range allowed {
			if strings.EqualFold(strings.TrimSpace(v), a) {
				if set != nil {
					set(c, a)
				}
				return nil
			}
		}
		return p.refuse(name, v, Alternatives(allowed)+", in any case")
	}
}

// Integer parses an integer setting of at least least and, if most > 0, at most most;
// empty (no default) gives 0.
func (p Parsers[C]) Integer(least, most int64, set func(c *C, v int64)) func(*C, string, string) error {
	want := fmt.Sprintf("an integer of at least %d", least)
	if most > 0 {
		want = fmt.Sprintf("an integer from %d to %d", least, most)
	}
	return func(c *C, name, s string) error {
		if s == "" {
			if set != nil {
				set(c, 0)
			}
			return nil
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < least || (most > 0 && v > most) {
			return p.refuse(name, s, want)
		}
		if set != nil {
			set(c, v)
		}
		return nil
	}
}

// Bytes parses a size in bytes from least to most: decimal, or with a K, M or G
// suffix (2^10, 2^20, 2^30, in any case); empty (no default) gives 0.
func (p Parsers[C]) Bytes(least, most int64, set func(c *C, v int64)) func(*C, string, string) error {
	want := fmt.Sprintf("bytes from %s to %s (e.g. 4194304 or 4M; K, M, G suffixes)", sizeText(least), sizeText(most))
	return func(c *C, name, s string) error {
		if s == "" {
			if set != nil {
				set(c, 0)
			}
			return nil
		}
		n, ok := ParseBytes(s, most)
		if !ok || n < least {
			return p.refuse(name, s, want)
		}
		if set != nil {
			set(c, n)
		}
		return nil
	}
}

// ParseBytes reads a size: decimal bytes, or with a K, M or G suffix (2^10, 2^20,
// 2^30, in any case), from 0 to most.
func ParseBytes(v string, most int64) (int64, bool) {
	t := strings.ToUpper(strings.TrimSpace(v))
	mult := int64(1)
	if k := len(t); k > 0 {
		switch t[k-1] {
		case 'K':
			mult, t = 1<<10, t[:k-1]
		case 'M':
			mult, t = 1<<20, t[:k-1]
		case 'G':
			mult, t = 1<<30, t[:k-1]
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > most/mult {
		return 0, false
	}
	return n * mult, true
}

// sizeText writes n bytes the shortest way ParseBytes reads back.
func sizeText(n int64) string {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if n >= u.mult && n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// Alternatives writes "a, b or c".
func Alternatives(words []string) string { return JoinWords(words, "or") }

// JoinWords writes words as a list in a sentence: "a, b and c" for conj "and".
func JoinWords(words []string, conj string) string {
	switch len(words) {
	case 0:
		return ""
	case 1:
		return words[0]
	}
	return strings.Join(words[:len(words)-1], ", ") + " " + conj + " " + words[len(words)-1]
}
