# gonccl developer entry points. Every target finds (or creates) the Python environment
# with the pinned torch through scripts/python-env.sh; set GONCCL_PYTHON to use your own.
#
#   make demo    set everything up, build, install, run the lecture's DDP examples on CPU
#   make test    build, install, run every test (Go, C ABI, Python multi-process)
#   make test-race  the race detector over core, transport and cuda (-short subset)
#   make test-exhaustive  the checks too slow for make test (GONCCL_EXHAUSTIVE=1)
#   make build   build and install the package into the Python environment
#   make lib     build only libgonccl.so (build/lib/) for C users
#   make wheel   a wheel (dist/) holding libgonccl.so, the extension and gonccl.h
#   make test-wheel  install that wheel into a fresh venv without Go, run the demo from it
#   make csrc-compat compile csrc against the headers of every supported torch (2.11-2.15)
#   make test-torch TORCH=2.11.0 [FILES=...] [PYTEST_ARGS=...]  Python tests on another torch (own venv)
#   make test-torch-ci  what CI runs on torch 2.11 after make test (TORCH_CI_FILES)
#   make gpu-check-dry  scripts/gpu-check.sh --dry-run (what needs no GPU; part of make test)
#   make gpu-check-kernels  the kernels' real-GPU test as a binary for the GPU check (no Go there)
#   make fuzz-short  run each wire fuzz target briefly (part of make test)
#   make kernels rebuild the CUDA reduction kernels (cuda/kernels/) with a pinned nvcc
#   make lint    gofmt, go vet, staticcheck, clang-format (csrc), ruff (Python)
#   make torch-suite  torch's own distributed tests (tests/torch_suite.py) on gonccl
#   make clean   remove build outputs

PY = $(shell scripts/python-env.sh)
GO ?= go
NPROC ?= 2

.PHONY: kernels setup build lib wheel test-wheel csrc-compat test-torch test-torch-ci gpu-check-kernels gpu-check-dry demo test test-go test-race test-exhaustive test-py soak soak-links fuzz-short lint clean torch-suite

setup:
	@scripts/python-env.sh >/dev/null
	$(GO) mod download

# The C++ extension's compiles (make build, wheel, test-torch, test-py, csrc-compat) go through ccache when it is
# installed (apt-get install ccache): its compiler wrappers come first on PATH, the cache
# lives in ~/.cache/gonccl/ccache and paths are taken relative to the checkout, so a fresh
# clone of an already built commit compiles nothing again. WITH_CCACHE= turns it off.
CCACHE_WRAPPERS ?= /usr/lib/ccache
WITH_CCACHE ?= $(if $(wildcard $(CCACHE_WRAPPERS)/g++),env PATH="$(CCACHE_WRAPPERS):$$PATH" \
  CCACHE_DIR="$${CCACHE_DIR:-$$HOME/.cache/gonccl/ccache}" CCACHE_BASEDIR="$(CURDIR)" CCACHE_NOHASHDIR=1,)

build: setup
	$(WITH_CCACHE) $(PY) -m pip install --quiet --disable-pip-version-check --no-build-isolation .

lib:
	mkdir -p build/lib
	CGO_ENABLED=1 $(GO) build -buildmode=c-shared -trimpath -o build/lib/libgonccl.so ./capi
	rm -f build/lib/libgonccl.h
	cp capi/gonccl.h build/lib/
	scripts/carried-stamp.sh write build/lib/libgonccl.so

# make wheel: dist/gonccl-VERSION-*.whl, built against this Python and torch. With
# GONCCL_LIBRARY=/path/to/libgonccl.so it wraps that library and needs no Go; otherwise it
# builds one first (make lib). The extension's objects are shared with make build (ninja).
WHEEL_LIB = $(or $(GONCCL_LIBRARY),$(CURDIR)/build/lib/libgonccl.so)

wheel: $(if $(GONCCL_LIBRARY),,lib)
	rm -f dist/gonccl-*.whl
	GONCCL_LIBRARY=$(abspath $(WHEEL_LIB)) $(WITH_CCACHE) $(PY) -m pip wheel --quiet --disable-pip-version-check \
	  --no-build-isolation --no-deps -w dist .
	@ls -l dist/gonccl-*.whl

# make test-wheel: installs the wheel into a fresh venv (torch seen through a .pth file, no
# `go` on PATH) and runs torchrun examples/ddp_simple.py on 2 CPU ranks from it.
test-wheel: wheel
	scripts/wheel-check.sh $(PY) dist/gonccl-*.whl

# make csrc-compat: every csrc file compiled (g++ -fsyntax-only) against the headers of each
# supported torch release, fetched once into ~/.cache/gonccl/torch-headers (~60 MB each).
# tests/test_torch_versions.py does the same for the oldest one in make test.
csrc-compat:
	$(WITH_CCACHE) $(PY) scripts/csrc_compat.py

# make test-torch TORCH=2.11.0: the Python suite (or FILES="tests/test_x.py ...", with
# PYTEST_ARGS="-k ...") against another torch release, in its own cached venv
# (~/.cache/gonccl/venv-torch-TORCH, made once by scripts/python-env.sh), with gonccl
# built against that torch around build/lib/libgonccl.so: scripts/test-torch.sh.
TORCH ?=
FILES ?= tests
PYTEST_ARGS ?=

test-torch: lib
	@test -n "$(TORCH)" || (echo "make test-torch: say which torch, e.g. TORCH=2.11.0"; exit 2)
	$(WITH_CCACHE) scripts/test-torch.sh $(TORCH) -v $(PYTEST_ARGS) $(FILES)

# make test-torch-ci: what .ci/run runs after make test: the contract, groups, collectives
# and ops-reference files on the oldest supported torch (the GPU image's). Of the
# parametrized files only the CPU cases at 2 and 3 ranks run there (TORCH_CI_SELECT: no
# 1- or 4-rank, ring-only or CUDA cases; the contract tests all run), so that CI stays
# under 30 minutes; TORCH_CI_SELECT= runs every case.
TORCH_CI = 2.11.0
TORCH_CI_FILES = tests/test_contract.py tests/test_groups_hooks.py tests/test_collectives.py tests/test_ops_reference.py tests/test_windows.py
TORCH_CI_SELECT ?= -k 'not cuda and not ws1 and not ws4 and not ring'

test-torch-ci:
	$(MAKE) test-torch TORCH=$(TORCH_CI) FILES="$(TORCH_CI_FILES)" PYTEST_ARGS="$(PYTEST_PAR) $(TORCH_CI_SELECT)"

# make gpu-check-kernels: the reduction kernels' real-GPU test (cuda/kernels/gpu_test.go) as
# a test binary the GPU check runs in part A (its machines have no Go): bring
# build/gpu-check/kernels-gpu.test with the tree.
gpu-check-kernels:
	mkdir -p build/gpu-check
	CGO_ENABLED=1 $(GO) test -c -o build/gpu-check/kernels-gpu.test ./cuda/kernels
	scripts/carried-stamp.sh write build/gpu-check/kernels-gpu.test

# make gpu-check-dry: the GPU check's dry run against the library make lib built: prints the
# plan (each step's limit and expected time on one H100, within the 480 s budget), builds the
# extension around the library (no Go), links and runs the C test through realcuda.c against
# the fake driver built as libcuda.so.1, runs the CPU parts.
gpu-check-dry: lib gpu-check-kernels
	GONCCL_PYTHON=$(PY) scripts/gpu-check.sh --dry-run --library $(CURDIR)/build/lib/libgonccl.so \
	  --report build/gpu-check/report-dry-run.md

demo: build
	mkdir -p build/demo
	cd build/demo && $(PY) -m torch.distributed.run --nproc_per_node=$(NPROC) ../../examples/ddp_simple.py
	cd build/demo && $(PY) -m torch.distributed.run --nproc_per_node=$(NPROC) ../../examples/ddp_example.py
	@echo "demo done: traces in build/demo/"

test: lint build test-go test-race test-py test-wheel gpu-check-dry

# test-go runs the CUDA tests (the fake driver's) at one hardware queue per context
# (CUDA_DEVICE_MAX_CONNECTIONS=1, as Megatron-style training sets it), where a stream
# waiting at the head of the queue holds back every other: what passes there passes with
# more queues. test-race runs them at the driver's default, 8, and with it the few tests
# of what only separate queues allow (they skip at one, saying so).
test-go:
	$(GO) vet ./...
	CUDA_DEVICE_MAX_CONNECTIONS=1 $(GO) test -count=1 -timeout 10m ./...
	$(MAKE) fuzz-short

# test-race: go test -race over the packages with goroutines of their own, -short (the
# stress test then runs 1,500 operations per rank instead of 50,000, and the collective
# sweeps go up to 4 ranks instead of 8), so that it stays a few minutes on 2 cores. The
# reduction-kernel comparisons are skipped: they run on one goroutine, the detector has
# nothing to find there, and they are its slowest tests (test-go runs them). So are the
# device path's sweeps in child processes (DevicePathAcrossProcesses, DevicePathWrongStep,
# and the same for point-to-point, DeviceP2P...: a minute under the detector), and its
# failure cases in child processes (a killed, stalled or disagreeing rank: timeouts of
# seconds each; test-go runs them all); its ranks as goroutines of one process
# (DevicePathRanksOfOneProcess, DeviceP2PRanksOfOneProcess) stay.
RACE_PKGS = ./core ./internal/... ./transport/... ./cuda/...
RACE_SKIP = VectorMatchesFallback|VectorHalfExhaustive|Float16Random|FromFloat32Random|MatchesReference$$|DevicePathAcrossProcesses|DevicePathWrongStepFails|DeviceP2PAcrossProcesses|DeviceP2PWrongStepFails|DevicePathPeerKilledMidOp|DevicePathStalledPeerTimesOut|DevicePathCountMismatch|DevicePathRootMismatch|DeviceP2PPeerKilledMidSend|DeviceP2PStalledPeerTimesOut

test-race:
	$(GO) test -race -short -count=1 -timeout 15m -skip '$(RACE_SKIP)' $(RACE_PKGS)

# fuzz-short: each wire fuzz target for FUZZTIME (a malicious peer's bytes must not
# crash, hang or blow up a rank). An execution count, not a duration: with a duration,
# Go's fuzzing coordinator can report a spurious "context deadline exceeded" when the
# time runs out while a loaded machine's worker is mid-input (golang/go#51484).
# Longer: make fuzz-short FUZZTIME=10m.
FUZZTIME ?= 50000x
FUZZ_TARGETS = transport:FuzzDecodeHeader transport/tcp:FuzzStreamLinkRecv transport:FuzzMsgConn \
	transport/tcp:FuzzAcceptHandshake transport/tcp:FuzzResumeAnswer core:FuzzBootstrapMsg core:FuzzP2PReader

fuzz-short:
	@for t in $(FUZZ_TARGETS); do \
	  pkg=$${t%%:*}; fn=$${t#*:}; echo "fuzz $$fn ($$pkg, $(FUZZTIME))"; \
	  $(GO) test -run='^$$' -fuzz="^$$fn\$$" -fuzztime=$(FUZZTIME) ./$$pkg || exit 1; \
	done

# test-exhaustive: what is too slow for make test, which skips it: the float16 and
# bfloat16 conversions against all 2^32 float32 values (GONCCL_EXHAUSTIVE=1). Run it on a
# schedule and whenever internal/reduce's conversions change.
test-exhaustive:
	@mkdir -p build
	GONCCL_EXHAUSTIVE=1 $(GO) test -count=1 -timeout 60m -v -run 'Exhaustive' ./internal/reduce > build/exhaustive.log 2>&1; \
	  rc=$$?; cat build/exhaustive.log; test $$rc = 0 || exit $$rc; \
	  if grep -- '--- SKIP' build/exhaustive.log; then echo "test-exhaustive: a test skipped"; exit 1; fi

# -rs lists every skipped test with its reason; GONCCL_REQUIRE (tests/conftest.py) turns
# skips for what it names into failures (.ci/run sets it); --durations=25 lists the
# slowest tests, where CI's time goes. PYTEST_JOBS files run at once (pytest-xdist,
# --dist loadfile: a file's tests, and its module fixtures, stay in one worker): many
# tests spend their time waiting on timeouts and peers, so 2 workers on 2 cores finish
# sooner than one. PYTEST_JOBS=0 runs them one after another. The tests' own compiles
# (csrc against torch 2.11's headers, the C ABI tests) go through ccache too.
PYTEST_JOBS ?= 2
PYTEST_PAR = $(if $(filter 0,$(PYTEST_JOBS)),,-n $(PYTEST_JOBS) --dist loadfile)

test-py:
	$(WITH_CCACHE) $(PY) -m pytest -v -rs --durations=25 $(PYTEST_PAR) tests

# make torch-suite: tests of torch's own distributed suite (DistributedTest._DistTestBase) on
# gonccl, 3 ranks; TESTS="test_a test_b" picks others than tests/torch_suite.py's DEFAULT.
torch-suite: build
	WORLD_SIZE=$(or $(WORLD_SIZE),3) $(PY) tests/torch_suite.py -v $(TESTS)

# The long soak: 20,000 random operations on 4 ranks checked against Gloo, with fds,
# threads, RSS and goroutines sampled (tests/test_soak.py; CI runs 2,000).
soak: build
	GONCCL_SOAK_OPS=20000 $(PY) -m pytest -v -s tests/test_soak.py

# The link memory soak at its full length: 2 hosts x 8 ranks of 8 MiB all-to-alls for 30 s,
# peak RSS per rank bounded (tests/test_link_memory.py; CI runs 8 s). Needs root, ip netns.
soak-links: build
	SOAK_SECONDS=30 $(PY) -m pytest -v -s tests/test_link_memory.py

# Linters, pinned: staticcheck (2026.2.2 = module v0.8.2) through the Go module proxy (go run caches it), ruff and
# clang-format from the Python environment (scripts/python-env.sh installs them).
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
PYBIN = $(dir $(PY))

lint: setup
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	$(PYBIN)clang-format --dry-run -Werror $$(git ls-files 'csrc/*.cpp' 'csrc/*.hpp')
	$(PYBIN)ruff check python tests bench examples scripts setup.py

# make kernels: cuda/kernels/gonccl_kernels.fatbin and its stamp, from cuda/kernels/*.cu*,
# with nvcc from PyPI (pinned; installed once into ~/.cache/gonccl/). For developers who
# change the kernels: the fatbin is committed and embedded, so building gonccl needs no nvcc.
kernels:
	scripts/build-kernels.sh

clean:
	rm -rf build dist python/*.egg-info python/gonccl/libgonccl.so python/gonccl/_C*.so

# make bench: gonccl against Gloo in one run, 2 ranks, nccl-tests-style tables for
# all_reduce and all_gather and the lecture's DDP step; JSON (and plots, if matplotlib is
# installed) in build/bench/. Override e.g. BENCH_NP=4 BENCH_ARGS="-b 8 -e 256M -f 2 -n 20".
# (bench/run.py ARGS runs this checkout's gonccl.bench against the installed gonccl.)
BENCH_NP ?= 2
BENCH_ARGS ?= -b 8 -e 64M -f 4 -n 5 -w 2 -c 1
BENCH_PLOT = $(shell $(PY) -c "import matplotlib" >/dev/null 2>&1 && echo 1)

.PHONY: bench bench-targets bench-latency
# make bench-targets: issue 4's targets (all_reduce 2/4 ranks, all_gather and
# reduce_scatter 2/4 ranks at 64 MiB, 8 B latency, memcpy fraction, DDP step) and issue
# 14's small-op targets (8 B all_reduce, 1,000 ops, blocking: vs Gloo and vs the C ABI
# floor; queued: throughput vs Gloo), 256 C ABI ranks' init, fds and 1 MiB all_reduces (bench/scale)
# and the 64 MiB all_reduce on 2 hosts x 2 ranks (scripts/two-hosts.sh; root) as a
# markdown table (median of 3 runs) and the 2-rank all_reduce plot in bench/results/.
# make bench-latency: only issue 14's small-op targets.
bench-targets: build
	$(PY) bench/targets.py

bench-latency: build
	$(PY) bench/targets.py --latency-only --skip-ddp

bench: build
	mkdir -p build/bench
	@test -n "$(BENCH_PLOT)" || echo "bench: matplotlib is not installed, no plots ($(PY) -m pip install matplotlib)"
	for c in all_reduce all_gather; do \
	  $(PY) -m gonccl.bench $$c $(BENCH_ARGS) -np $(BENCH_NP) --backends gonccl,gloo \
	    --json build/bench/$$c.json $(if $(BENCH_PLOT),--plot build/bench/$$c.png) || exit 1; \
	done
	$(PY) -m gonccl.bench ddp -np $(BENCH_NP) --backends gonccl,gloo --rounds 2 --json build/bench/ddp.json

# make bench-scale: N ranks as plain C processes through the C ABI (bench/scale): init time,
# fds per rank, all_reduces of 8 B and 1 MiB in ordinary and goncclMemAlloc memory, and
# the time per operation of 10 more 1 MiB all_reduces back to back, for SCALE_NP ranks.
# Table on stdout, JSON in build/bench/. (make test runs 128 of them: tests/test_scale.py.)
SCALE_NP ?= 64 128 256

.PHONY: bench-scale
bench-scale: lib
	mkdir -p build/bench
	$(PY) bench/scale/scale.py -np $(SCALE_NP) --alloc --loop 10 --json build/bench/scale.json

# make bench-many-hosts: HOSTS_H "hosts" (network namespaces on one bridge, bench/scale/hosts.py;
# needs root) of HOSTS_R plain C ranks each (bench/scale), one communicator over all:
# init, fds and peak RSS per rank, all_reduces of 8 B and 1 MiB, then the time per operation of
# 10 more 1 MiB all_reduces back to back, and exactness. Table on stdout, JSON in build/bench/.
# (make test runs 8 x 8 of them: tests/test_many_hosts.py.)
HOSTS_H ?= 16
HOSTS_R ?= 16

.PHONY: bench-many-hosts
bench-many-hosts: lib
	mkdir -p build/bench
	$(PY) bench/scale/scale.py --hosts $(HOSTS_H) -np $$(($(HOSTS_H) * $(HOSTS_R))) --loop 10 \
	  --json build/bench/many_hosts_$(HOSTS_H)x$(HOSTS_R).json

# make bench-2hosts: all_reduce 8 B..64 MiB, gonccl against Gloo, on 2 "hosts" x 2 ranks
# (network namespaces joined by a veth: scripts/two-hosts.sh; needs root). Ranks of one
# namespace use shared memory, the namespaces talk TCP over the veth. Tables on stdout,
# JSON in build/bench/. Override BENCH_2H_ARGS, or the TCP layout with
# GONCCL_SOCKET_NTHREADS / GONCCL_NSOCKS_PERTHREAD.
BENCH_2H_ARGS ?= -b 8 -e 64M -f 4 -n 10 -w 2 -c 1

# make bench-hosts: all_reduce, all_gather, reduce_scatter and broadcast, 8 B..64 MiB, on 2
# "hosts" x 2 ranks as bench-2hosts, each run measuring gonccl (resumable links, the
# default), gonccl-noresume (GONCCL_LINK_RETRY_MS=0) and Gloo. Tables on stdout, JSON in
# build/bench/<collective>_hosts.json. Namespaces named gnbh<pid>0/1, removed at the end.
BENCH_HOSTS_COLLS ?= all_reduce all_gather reduce_scatter broadcast
BENCH_HOSTS_ARGS ?= -b 8 -e 64M -f 4 -n 10 -w 2 -c 1

.PHONY: bench-hosts
bench-hosts: build
	mkdir -p build/bench
	for c in $(BENCH_HOSTS_COLLS); do \
	  GONCCL_2H_PREFIX=gnbh$$$$ GONCCL_PYTHON=$(PY) scripts/two-hosts.sh bench $$c $(BENCH_HOSTS_ARGS) \
	    --backends gonccl,gonccl-noresume,gloo --json $(CURDIR)/build/bench/$${c}_hosts.json || exit 1; \
	done

.PHONY: bench-2hosts
bench-2hosts: build
	mkdir -p build/bench
	GONCCL_PYTHON=$(PY) scripts/two-hosts.sh bench all_reduce $(BENCH_2H_ARGS) --backends gonccl,gloo \
	  --json $(CURDIR)/build/bench/all_reduce_2hosts.json
