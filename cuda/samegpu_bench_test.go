package cuda_test

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda"
	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/cuda/samegpu"
)

// BenchmarkTimeSlicedAllReduce compares, on the fake driver with its contexts taking
// turns on one device (FAKECUDA_TIMESLICE_US=500), the device path (whose streams wait
// on the GPU for each other's flags, every round) with the same-GPU path (one round:
// the launcher's stream waits for the others', theirs for its kernels): 2 rank
// processes, 16 KiB fp32 all_reduces (GONCCL_DEVTEST_COUNT: another count of floats),
// in place on cuMemAlloc buffers; GONCCL_DEVTEST_TIMESLICE_US: another slice, 0 none. It reports each path's time per operation and
// the GPU-side waits it issued, as rank 0 measured them. The fake's slices are not the
// hardware's; the ratio is what it shows.
func BenchmarkTimeSlicedAllReduce(b *testing.B) {
	open(b)
	b.Setenv("GONCCL_DEVTEST_SCRIPT", "timesliced")
	b.Setenv("GONCCL_DEVTEST_OPS", strconv.Itoa(max(b.N, 20)))
	slice := "500"
	if v := os.Getenv("GONCCL_DEVTEST_TIMESLICE_US"); v != "" {
		slice = v // 0: no turns (each context runs as if alone)
	}
	b.Setenv("FAKECUDA_TIMESLICE_US", slice)
	key := fmt.Sprintf("bench-%d-%d", os.Getpid(), time.Now().UnixNano())
	b.Setenv("FAKECUDA_TIMESLICE_KEY", key)
	defer os.Remove("/dev/shm/fakecuda-ts-" + key + "-0")
	out, err := runDevRanks(b, "0,0", "", "0,0")
	if err != nil {
		b.Fatalf("%v\n%s", err, out)
	}
	m := regexp.MustCompile(`device-path ([0-9.]+) us/op ([0-9]+) waits; same-GPU ([0-9.]+) us/op ([0-9]+) waits`).FindStringSubmatch(out)
	if m == nil {
		b.Fatalf("no timings in the ranks' output:\n%s", out)
	}
	for i, unit := range []string{"devpath-us/op", "devpath-gpu-waits", "samegpu-us/op", "samegpu-gpu-waits"} {
		v, _ := strconv.ParseFloat(m[i+1], 64)
		b.ReportMetric(v, unit)
	}
}

// timeSlicedRank is a rank of BenchmarkTimeSlicedAllReduce.
func timeSlicedRank(d *driver.Driver, f *cudatest.Fake, id core.UniqueID, rank int, devs []int, log *os.File) error {
	nranks := len(devs)
	ops, _ := strconv.Atoi(os.Getenv("GONCCL_DEVTEST_OPS"))
	r, err := openRank(d, f, id, rank, devs, 60*time.Second)
	if err != nil {
		return err
	}
	defer r.c.Destroy()
	c, s, ctx := r.c, r.s, r.ctx
	exchange := hostExchange(c)
	red, err := reducerFor(d, ctx)
	if err != nil {
		return err
	}
	count := 4096
	if n, _ := strconv.Atoi(os.Getenv("GONCCL_DEVTEST_COUNT")); n > 0 {
		count = n
	}
	buf, err := d.MemAllocIn(ctx, 4*count)
	if err != nil {
		return err
	}
	defer d.MemFreeIn(ctx, buf)
	sh, err := cuda.NewShared(d, ctx, rank, nranks, 1<<20, exchange)
	if err != nil {
		return err
	}
	defer sh.Close(time.Minute)
	g, err := samegpu.NewSameGPU(d, ctx, rank, nranks, time.Minute, exchange)
	if err != nil {
		return err
	}
	defer g.Close()
	run := func(op func() error) (float64, int, error) {
		if err := barrier(c); err != nil {
			return 0, 0, err
		}
		w := f.Counters().GPUWaits
		start := time.Now()
		for range ops {
			if err := op(); err != nil {
				return 0, 0, err
			}
		}
		f.Drain(uintptr(s))
		return float64(time.Since(start).Microseconds()) / float64(ops), f.Counters().GPUWaits - w, nil
	}
	devUs, devWaits, err := run(func() error { return sh.AllReduce(s, red, buf, buf, count, core.Float32, core.Sum) })
	if err != nil {
		return err
	}
	sameUs, sameWaits, err := run(func() error { return g.AllReduce(s, red, buf, buf, count, core.Float32, core.Sum) })
	if err != nil {
		return err
	}
	if err := barrier(c); err != nil {
		return err
	}
	if rank == 0 {
		fmt.Fprintf(log, "device-path %.1f us/op %d waits; same-GPU %.1f us/op %d waits\n", devUs, devWaits, sameUs, sameWaits)
	}
	return nil
}
