/*
 * fakecuda_strict.h: a hook of the fake CUDA driver alone, which
 * tests/capi/realcuda.c (the same hooks on a real GPU) does not provide: counters of
 * what only the fake can see (drain.c, deadpeer.c; strict.h has the rest). Go tests
 * reach it with dlsym (cuda/cudatest/strict.go).
 */
#ifndef FAKECUDA_STRICT_HOOKS_H_
#define FAKECUDA_STRICT_HOOKS_H_

#ifdef __cplusplus
extern "C" {
#endif

/* What the stricter parts of the fake count (drain.c, deadpeer.c): device allocations
 * and frees (cuMemAlloc / cuMemFree), exports (cuIpcGetMemHandle), mappings opened and
 * closed (cuIpcOpenMemHandle / cuIpcCloseMemHandle), drains (allocations and frees of
 * any kind, and lazy loads, each waits for the whole context), lazy loads (the first
 * launch of a kernel neither loaded eagerly nor by cuFuncLoad) and writes and reads
 * that reached a dead exporter's memory (deadpeer.c). */
typedef struct {
  long dev_allocs, dev_frees;
  long ipc_exports, ipc_opens, ipc_closes;
  long drains;
  long lazy_loads;
  long dead_peer_writes; /* stream writes into a dead exporter's memory */
  long dead_peer_reads;  /* stream reads of a dead exporter's memory */
  long dead_maker_kernel_reads; /* kernels run on memory another process made and has died (module.c) */
  long kernels_aborted;         /* kernels that found their abort word set and touched nothing */
} fakecudaStrictCounters;
void fakecudaGetStrictCounters(fakecudaStrictCounters* out);
/* The calls of each driver entry point so far (calls.c), as "name count" lines, written
 * into buf (at most n bytes, NUL-terminated where there is room); returns the bytes the
 * whole text needs, its NUL included. */
int fakecudaCallCounts(char* buf, size_t n);
/* Frees cuMemAlloc memory at p as cuMemFree does, but while other processes map it
 * (cuIpcOpenMemHandle), as PyTorch's caching allocator frees a segment whatever a peer
 * mapped: their streams' later reads and writes of it fault (deadpeer.c). 0, or -1 if p
 * is not the base of live cuMemAlloc memory. */
int fakecudaFreeExported(void* p);

#ifdef __cplusplus
}
#endif
#endif
