// Package testtime scales the wall-clock limits of tests by one factor,
// GONCCL_TEST_TIME_SCALE (default 1), which the Python tests read too
// (tests/_harness.py scaled()). A limit a test puts on how long something may
// take, or a deadline an operation that must succeed runs under, goes through D,
// so that a slow or loaded machine (2 busy cores, the race detector) raises
// every limit at once instead of failing the fastest-looking ones. Timeouts
// that a test wants to expire are not scaled: they are what is under test.
//
// Only tests import this package.
package testtime

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"
)

// EnvVar names the scale factor's environment variable.
const EnvVar = "GONCCL_TEST_TIME_SCALE"

var scale = sync.OnceValue(func() float64 {
	v := os.Getenv(EnvVar)
	if v == "" {
		return 1
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f > 0) || f > 1000 {
		panic(fmt.Sprintf("%s=%q: want a number > 0 and <= 1000", EnvVar, v))
	}
	return f
})

// Scale is the factor GONCCL_TEST_TIME_SCALE sets (1 when unset); an
// unparsable or non-positive value panics, so a typo cannot pass unnoticed.
func Scale() float64 { return scale() }

// D is d times Scale().
func D(d time.Duration) time.Duration { return time.Duration(float64(d) * scale()) }
