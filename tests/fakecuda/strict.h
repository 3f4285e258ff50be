/*
 * strict.h: what the fake driver's stricter parts share (drain.c, deadpeer.c, and the
 * calls into them from memory.c, ipc.c and module.c). Hidden, like
 * fakecuda_internal.h's declarations; tests see only fakecuda.h.
 */
#ifndef FAKECUDA_STRICT_H_
#define FAKECUDA_STRICT_H_

#include "fakecuda_internal.h"
#include "fakecuda_strict.h"

#pragma GCC visibility push(hidden)

/* The counters of fakecudaGetStrictCounters (fakecuda.h). mu guards them. */
extern fakecudaStrictCounters g_strict;

/* drain_ctx waits, as the real cuMemAlloc / cuMemFree / cuMemHostAlloc / cuMemFreeHost
 * (and a lazily loaded kernel's first launch) do, until every stream of the calling
 * thread's current context has run what was queued on it before the call. Where a
 * stream makes no progress for the drain timeout (FAKECUDA_DRAIN_TIMEOUT_MS, default
 * 20000: it waits on a flag or an event nobody sets), it reports the stream and what it
 * is blocked on and aborts: the real driver would hang there for ever. call names the
 * entry point. mu not held; the current context was checked (need_ctx). */
void drain_ctx(const char* call);

/* describe_wait writes what o (a stream's head op) waits for into buf and returns 1,
 * or returns 0 if o is not a wait on a flag (ipc.c). mu held. */
int describe_wait(const op* o, char* buf, size_t n);

/* deadpeer.c. mapping_opened records a mapping [p, p+n) of device memory exported by
 * process pid (cuIpcOpenMemHandle) in the exporter's table of mappers (the page after
 * the allocation, mapped as ctl), mapping_closed drops it. mu held. */
void mapping_opened(char* p, size_t n, int pid, unsigned* ctl);
void mapping_closed(char* p);
/* check_write checks a write into [p, p+n) by a stream operation being queued
 * (queued 1) or running (0): if that lies in a mapping whose exporter has died (the
 * real driver's write would hit memory freed with the dead process's context and can
 * poison this one) it counts dead_peer_writes and faults. what names the write. mu
 * held. */
void check_write(const void* p, size_t n, const char* what, int queued);
/* check_read is check_write for a read (a copy's source, a kernel's input, a wait's
 * flag), counted in dead_peer_reads. mu held. */
void check_read(const void* p, size_t n, const char* what, int queued);
/* check_no_mappers faults if a live process other than this one still maps the
 * allocation whose mapper table is ctl: freeing it pulls the memory from under that
 * process's streams. mu held. */
void check_no_mappers(const unsigned* ctl, const void* p);
/* maker_dead reports whether [p, p+n) lies in memory imported from another process
 * (vmm.c: cuMemImportFromShareableHandle) whose maker has died: the memory is still
 * valid, but what is there is a dead rank's. mu held. */
int maker_dead(const void* p, size_t n);
/* mark_freed records in the mapper table ctl that its exporter freed the allocation
 * while others mapped it (fakecudaFreeExported): their streams' accesses fault. mu
 * held. */
void mark_freed(unsigned* ctl);

/* visible.c: the physical fake GPU that ordinal names in this process
 * (CUDA_VISIBLE_DEVICES), and the ordinal of physical GPU phys here (-1: not
 * visible). */
int physical(int ordinal);
int ordinal_of(int phys);

/* ipc.c: whether physical GPU phys can access peer's memory (FAKECUDA_NO_PEER,
 * FAKECUDA_PEER_GROUPS). */
int peer_ok(int phys, int peer);
/* ipc.c: whether the allocation at base is cuMemAlloc memory cuIpcGetMemHandle exports
 * (CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE). mu held. */
int ipc_exportable(const void* base);
/* ipc.c: ipc_forget unmaps the IPC mappings opened in ctx, which was reset: they died
 * with it, as the driver's do. mu held. */
void ipc_forget(const fakeCtx* ctx);
/* module.c: check_device faults where an operation of a stream of device dev (a kernel,
 * a stream memory operation) touches device memory [p, p+n) dev may not access:
 * another GPU's cuMemAlloc memory (gonccl never enables peer access), or cuMemMap'ed
 * memory without cuMemSetAccess for dev; an illegal-address fault on a GPU. Copies are
 * not checked: with unified addressing the driver copies between any two devices. mu
 * held. */
void check_device(const void* p, size_t n, int dev, const char* what);

#pragma GCC visibility pop

#endif
