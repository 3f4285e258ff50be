package core

import (
	"fmt"
	"testing"
)

// benchOnAll times op on 4 ranks over in-memory links, bytes being what one rank
// sends or receives per call.
func benchOnAll(b *testing.B, bytes int, op func(c *Comm) (*Request, error)) {
	comms := memComms(b, 4, func(c *config) { c.chunkBytes = 512 << 10 })
	b.SetBytes(int64(bytes))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for r, err := range onAll(b, comms, op) {
			if err != nil {
				b.Fatalf("rank %d: %v", r, err)
			}
		}
	}
}

func BenchmarkReduce(b *testing.B) {
	for _, size := range []int{4 << 10, 4 << 20} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			send, recv := make([][]byte, 4), make([][]byte, 4)
			for r := range send {
				send[r], recv[r] = make([]byte, size), make([]byte, size)
			}
			benchOnAll(b, size, func(c *Comm) (*Request, error) {
				return c.Reduce(send[c.rank], recv[c.rank], size/4, Float32, Sum, 0)
			})
		})
	}
}

func BenchmarkReduceScatter(b *testing.B) {
	size := 16 << 20
	send, recv := make([][]byte, 4), make([][]byte, 4)
	for r := range send {
		send[r], recv[r] = make([]byte, size), make([]byte, size/4)
	}
	benchOnAll(b, size, func(c *Comm) (*Request, error) {
		return c.ReduceScatter(send[c.rank], recv[c.rank], size/16, Float32, Sum)
	})
}

func BenchmarkAlltoAll(b *testing.B) {
	size := 16 << 20
	send, recv := make([][]byte, 4), make([][]byte, 4)
	for r := range send {
		send[r], recv[r] = make([]byte, size), make([]byte, size)
	}
	benchOnAll(b, size, func(c *Comm) (*Request, error) {
		return c.AlltoAll(send[c.rank], recv[c.rank], size/16, Float32)
	})
}
