package samegpu

import "testing"

// TestStageLayout: the places of a rank's send and recv in its exchange buffer keep
// each address's remainder modulo xAlign, keep overlapping buffers where they are
// relative to each other (so an operation in place stays in place), keep apart buffers
// apart, and fit in the bytes the layout says it takes.
func TestStageLayout(t *testing.T) {
	const base = 0x7f0000100000
	for _, c := range []struct {
		name                      string
		send                      uintptr
		sendBytes                 int
		recv                      uintptr
		recvBytes                 int
		wantIn, wantOut, wantSize int
	}{
		{"in place", base + 4, 4000, base + 4, 4000, 4, 4, 4004},
		{"apart", base + 8, 12, base + 0x10000, 100, 8, 256, 356},
		{"apart, unaligned recv", base, 256, base + 0x10003, 100, 0, 259, 359},
		{"all_gather input in its output", base + 3*4000, 4000, base, 4 * 4000, 3 * 4000, 0, 4 * 4000},
		{"reduce_scatter output in its input", base + 0x40, 4 * 1000, base + 0x40 + 2*1000, 1000, 0x40, 0x40 + 2000, 0x40 + 4000},
		{"no send (broadcast, not the root)", 0, 0, base + 0x21, 64, 0, 0x21, 0x21 + 64},
	} {
		in, out, size := stageLayout(c.send, c.sendBytes, c.recv, c.recvBytes)
		if in != c.wantIn || out != c.wantOut || size != c.wantSize {
			t.Errorf("%s: in %d, out %d, size %d; want %d, %d, %d", c.name, in, out, size, c.wantIn, c.wantOut, c.wantSize)
		}
		if c.sendBytes > 0 && uintptr(in)%xAlign != c.send%xAlign || uintptr(out)%xAlign != c.recv%xAlign {
			t.Errorf("%s: alignment lost: in %d (send %#x), out %d (recv %#x)", c.name, in, c.send, out, c.recv)
		}
		if in+c.sendBytes > size || out+c.recvBytes > size {
			t.Errorf("%s: the buffers do not fit in %d bytes", c.name, size)
		}
	}
}
