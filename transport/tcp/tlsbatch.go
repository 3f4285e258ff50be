package tcp

import (
	"crypto/tls"
	"net"
	"sync"
)

// crypto/tls sends each record (at most 16 KiB) with a system call of its own. For
// the large frames of collectives that is one call per 16 KiB, where plain TCP makes
// one per 256 KiB piece (striped.go) or per frame. tlsConn gathers the records of one
// large Write in batchConn, under the tls.Conn, and sends them batchBytes at a time.

// batchBytes is how much of a large Write's records batchConn gathers per system call;
// batchFrom is the smallest Write that is batched.
const (
	batchBytes = 256 << 10
	batchFrom  = 32 << 10
)

// tlsConn is the connection a TLS link runs over.
type tlsConn struct {
	*tls.Conn
	raw *batchConn
}

// Close implements net.Conn. It closes the TCP connection without TLS's close_notify
// alert: frames carry their own lengths, so nothing needs it, and sending it into the
// full socket of a peer that stopped reading would hold Close for seconds.
func (c *tlsConn) Close() error { return c.raw.Conn.Close() }

// Write implements net.Conn: a large p is encrypted into batches. It returns exactly
// how many bytes of p went out in whole records (a session's counts rely on it): p is
// handed to TLS a record's worth at a time, and where a batch's send fails, the
// records whose bytes all reached the kernel are counted, no more.
func (c *tlsConn) Write(p []byte) (int, error) {
	if len(p) < batchFrom {
		return c.Conn.Write(p)
	}
	c.raw.begin()
	var err error
	for done := 0; done < len(p) && err == nil; {
		k := min(len(p)-done, tlsRecordData)
		_, err = c.Conn.Write(p[done : done+k])
		done += k
		c.raw.mark(done)
	}
	if ferr := c.raw.end(); err == nil {
		err = ferr
	}
	return c.raw.delivered(), err
}

// tlsRecordData is the payload of one full TLS record (DynamicRecordSizingDisabled).
const tlsRecordData = 16 << 10

// batchConn is the TCP connection under a tlsConn. Outside a batch its writes go
// straight through (the handshake, alerts, and small frames); within one they are
// copied into buf and sent when it fills and when the batch ends. mu keeps the order
// of writes from other goroutines (crypto/tls may answer a key update from Read).
type batchConn struct {
	net.Conn
	mu       sync.Mutex
	batching bool
	buf      []byte
	err      error // the first failed send of the current batch
	// Within a batch: the bytes gathered and those that reached the kernel, and
	// the marks of the plaintext each record ends (see tlsConn.Write).
	gathered, sent int
	marks          []batchMark
}

// batchMark says that the batch's first cipher bytes carry the first plain bytes of
// the Write.
type batchMark struct{ cipher, plain int }

// mark notes that the bytes gathered so far end plaintext byte plain.
func (c *batchConn) mark(plain int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.marks = append(c.marks, batchMark{c.gathered, plain})
}

// delivered is how many plaintext bytes of the batch's Write went out in records that
// reached the kernel whole.
func (c *batchConn) delivered() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, m := range c.marks {
		if m.cipher > c.sent {
			break
		}
		n = m.plain
	}
	return n
}

func (c *batchConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.batching {
		return c.Conn.Write(p)
	}
	if c.err != nil {
		return 0, c.err
	}
	if len(c.buf)+len(p) > batchBytes {
		c.flushLocked()
		if c.err != nil {
			return 0, c.err
		}
	}
	c.buf = append(c.buf, p...)
	c.gathered += len(p)
	return len(p), nil
}

func (c *batchConn) begin() {
	c.mu.Lock()
	c.batching, c.err = true, nil
	c.gathered, c.sent, c.marks = 0, 0, c.marks[:0]
	if c.buf == nil {
		c.buf = make([]byte, 0, batchBytes+recordMax)
	}
	c.mu.Unlock()
}

// end sends what the batch gathered and returns the batch's first error.
func (c *batchConn) end() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.flushLocked()
	c.batching = false
	return c.err
}

func (c *batchConn) flushLocked() {
	if len(c.buf) > 0 && c.err == nil {
		var n int
		n, c.err = c.Conn.Write(c.buf)
		c.sent += n
	}
	c.buf = c.buf[:0]
}

// recordMax bounds one TLS 1.3 record on the wire: 16 KiB of data, the content type,
// the AEAD tag and the header, with room to spare.
const recordMax = 16<<10 + 256
