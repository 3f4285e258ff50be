package core

import (
	"time"

	"go.uber.org/zap/zapcore"
)

// testHooks are the ways tests reach into a communicator or a bootstrap root. Nothing
// outside this package can set them (Options.test and newUniqueID's argument are
// unexported), so in production they are all unset.
type testHooks struct {
	// injectPanic is called with the name of every goroutine site as it starts (see
	// config.injectPanic); it replaces GONCCL_TEST_INJECT_PANIC's.
	injectPanic func(site string)
	// logTee also receives every log entry.
	logTee zapcore.Core
	// meshListening is told each rank's peer listener address as the rank starts
	// connecting to its peers.
	meshListening func(rank int, addr string)
	// dialed is called after each connection the rank dials to a peer.
	dialed func(rank, peer int, ch uint8)
	// handshakeTimeout, if set, replaces defaultHandshakeTimeout.
	handshakeTimeout time.Duration
	// heartbeatsPaused is asked at each heartbeat round whether the rank sends none
	// (true: it falls silent without closing anything, as a hung process would).
	heartbeatsPaused func(rank int) bool
	// byeDelay holds every goodbye frame this long before its writer sends it, as a
	// writer waiting for a core on a crowded host would.
	byeDelay time.Duration
	// lostDelay holds every lost-rank report (MsgLost) this long before its writer
	// sends it, so that the end of a peer's links can arrive before the news of why.
	lostDelay time.Duration
}

// apply puts the hooks (nil: none) into cfg.
func (h *testHooks) apply(cfg *config) {
	if h == nil {
		return
	}
	if h.injectPanic != nil {
		cfg.injectPanic = h.injectPanic
	}
	cfg.test = *h
}

// handshake bounds how long an unauthenticated connection may take to prove itself
// before it is dropped.
func (h *testHooks) handshake() time.Duration {
	if h.handshakeTimeout > 0 {
		return h.handshakeTimeout
	}
	return defaultHandshakeTimeout
}
