package main

import (
	"strconv"
	"strings"
)

// parseByteSize reads a size setting: decimal bytes, or with a K, M or G suffix
// (2^10, 2^20, 2^30; either case; spaces around it ignored). ok is false for anything
// else, for a negative size, or for one above max bytes; the caller names the
// variable and its range in the error.
func parseByteSize(v string, max int64) (n int64, ok bool) {
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
	if err != nil || n < 0 || n > max/mult {
		return 0, false
	}
	return n * mult, true
}
