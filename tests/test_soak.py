"""Soak: a long randomized run on 4 ranks (workers/differential_worker.py in soak mode:
the default group and three random subgroups on gonccl, every result checked against
Gloo and a local reference) while each rank samples its open fds, threads, RSS,
goroutines and Go heap ten times. After the first tenth (warm-up: groups created,
buffers grown), nothing may grow beyond the bounds below.

CI runs GONCCL_SOAK_OPS (default 2000) operations; `make soak` runs 20,000.
"""

import json
import os

import pytest

NOPS = int(os.environ.get("GONCCL_SOAK_OPS", "2000"))
WS = 4
TIMEOUT = max(300, NOPS // 4)
# Growth allowed between the sample after warm-up and the last one, per rank. Threads
# and goroutines may grow while the backend's completion threads grow to their cap
# (8 per process group; a C thread that calls into Go brings a goroutine of its own).
BOUNDS = {"fds": 0, "threads": 8, "goroutines": 8, "comms": 0, "rss_mib": 64.0, "go_heap_mib": 1.0}


@pytest.mark.timeout(TIMEOUT + 120)
def test_soak(worker_runs):
    run = worker_runs("soak", "differential_worker.py", WS, timeout=TIMEOUT,
                      env={"GONCCL_DIFF_SOAK": "1"}, args=(str(NOPS), "4242"), grace=60)
    records = run.section("differential")
    for r, rec in enumerate(records):
        samples = rec["data"]["resources"]
        print(f"\nrank {r}: " + json.dumps(samples))
        assert len(samples) >= 3, samples
        assert "goroutines" in samples[0], f"libgonccl's goncclDebugStats was not reachable: {samples[0]}"
        warm, last = samples[1], samples[-1]
        for key, bound in BOUNDS.items():
            grew = last[key] - warm[key]
            assert grew <= bound, (
                f"rank {r}: {key} grew by {grew} from op {warm['step']} to op {last['step']} "
                f"(bound {bound}): {samples}")
    run.section("shutdown")
