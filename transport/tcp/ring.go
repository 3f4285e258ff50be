package tcp

// The ring a Session keeps its last written bytes in, for resends (see session.go).

// ring holds the last bytes written into a stream: stream bytes [end-n, end), the
// byte at offset o in buf[o % len(buf)]. It grows to max as the stream does.
type ring struct {
	buf []byte
	max int
	n   int
	end uint64
}

func (r *ring) write(p []byte) {
	switch {
	case len(p) == 0:
		return
	case r.max == 0:
		r.end += uint64(len(p))
		return
	case len(p) >= r.max: // only its tail can be asked for
		if len(r.buf) < r.max {
			r.buf = make([]byte, r.max)
		}
		r.end += uint64(len(p) - r.max)
		p = p[len(p)-r.max:]
	case r.n+len(p) > len(r.buf) && len(r.buf) < r.max:
		old := r.since(r.end - uint64(r.n))
		r.buf = make([]byte, min(r.max, max(2*len(r.buf), r.n+len(p), 4<<10)))
		r.place(r.end-uint64(len(old)), old)
	}
	r.place(r.end, p)
	r.end += uint64(len(p))
	r.n = min(r.n+len(p), len(r.buf))
}

// rewind takes the stream back to end (at most the current end): the bytes after it
// were written here but never went out. Those before it stay as they are.
func (r *ring) rewind(end uint64) {
	if end >= r.end {
		return
	}
	r.n = max(0, r.n-int(r.end-end))
	r.end = end
}

// place copies p to stream offset at (len(p) <= len(buf)).
func (r *ring) place(at uint64, p []byte) {
	i := int(at % uint64(len(r.buf)))
	k := copy(r.buf[i:], p)
	copy(r.buf, p[k:])
}

// since returns a copy of the stream bytes [from, end) (from >= end-n).
func (r *ring) since(from uint64) []byte {
	out := make([]byte, r.end-from)
	if len(out) == 0 {
		return out
	}
	i := int(from % uint64(len(r.buf)))
	k := copy(out, r.buf[i:])
	copy(out[k:], r.buf)
	return out
}
