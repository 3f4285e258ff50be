"""gonccl.bench: nccl-tests-style benchmarks of torch.distributed backends.

    python -m gonccl.bench all_reduce -b 8 -e 64M -f 4 --backends gonccl,gloo -np 2
    python -m gonccl.bench ddp --backends gonccl,gloo -np 2

Without RANK/WORLD_SIZE in the environment it launches its own `-np` ranks (one
process each, env:// rendezvous on 127.0.0.1); under torchrun it runs as one rank.
Rank 0 prints nccl-tests' table (size, count, type, redop, root, then time / algbw /
busbw / #wrong out-of-place and in-place), one row per backend, and a gonccl/gloo
busbw ratio when both run. Definitions follow nccl-tests' doc/PERFORMANCE.md; see
`python -m gonccl.bench --help` and gonccl/bench/collectives.py.
"""

from gonccl.bench.collectives import BUSBW_FACTORS, COLLECTIVES, busbw_factor

__all__ = ["BUSBW_FACTORS", "COLLECTIVES", "busbw_factor"]
