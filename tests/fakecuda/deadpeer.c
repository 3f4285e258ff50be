/*
 * deadpeer.c: device memory shared between processes dies with its exporter (see
 * strict.h). On a real GPU, memory mapped with cuIpcOpenMemHandle belongs to the
 * exporting process's context: when that process dies (or frees it) the memory goes
 * with it, and a stream of another process that still writes into it faults, leaving a
 * sticky error that poisons its whole context. The fake keeps the memory (a memfd)
 * but faults instead:
 *
 * - a write by a stream operation (cuStreamWriteValue32, a device copy's destination,
 *   a kernel's output) into a mapping whose exporter has died, when queued or when it
 *   runs, faults (and is counted in dead_peer_writes); so does a read (a device copy's
 *   source, a kernel's input, a stream wait's flag: dead_peer_reads), as a survivor's
 *   released stream that reads a dead peer's buffer can fault on a GPU. gonccl's
 *   streams post their flags into host memory every rank maps (cuda/hostflags.go), and
 *   the device path's scratch is memory that outlives its maker (vmm.c), so a
 *   survivor's queued posts to and reads of a dead peer land safely; before each, the
 *   device path's kill tests died here;
 * - cuMemFree of exported memory that a live process still maps: each allocation has a
 *   page after it (in the same memfd) listing the processes that opened it, which the
 *   exporter checks when it frees;
 * - an exporter that frees such memory all the same, as PyTorch's caching allocator
 *   frees a segment (cudaFree) whatever a peer mapped (the hook fakecudaFreeExported):
 *   the page records it, and an importer's stream that then reads or writes the mapping
 *   faults (counted as a dead-peer read or write), as the memory is gone on a GPU.
 */
#define _GNU_SOURCE
#include "strict.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The mapper table: the pids of the processes that map the allocation. */
#define MAPPERS 64

typedef struct mapping {
  char* p;
  size_t n;
  int pid;        /* the exporter */
  unsigned* ctl;  /* its mapper table */
  int dead;       /* the exporter was seen dead */
  struct mapping* next;
} mapping;

static mapping* g_mappings; /* guarded by mu */

/* alive reports whether process pid still runs (not gone, not a zombie). */
static int alive(int pid) {
  char path[64], buf[256];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE* f = fopen(path, "r");
  if (f == NULL) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char* close = strrchr(buf, ')');
  if (close == NULL || close[1] == 0) return 1;
  char state = close[2];
  return state != 'Z' && state != 'X';
}

void mapping_opened(char* p, size_t n, int pid, unsigned* ctl) {
  mapping* m = calloc(1, sizeof *m);
  m->p = p;
  m->n = n;
  m->pid = pid;
  m->ctl = ctl;
  m->next = g_mappings;
  g_mappings = m;
  unsigned me = (unsigned)getpid();
  for (int i = 0; i < MAPPERS; i++) {
    unsigned zero = 0;
    if (__atomic_compare_exchange_n(&ctl[i], &zero, me, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) return;
  }
  fault("more than %d processes map the device memory of process %d", MAPPERS, pid);
}

void mapping_closed(char* p) {
  for (mapping** pm = &g_mappings; *pm; pm = &(*pm)->next) {
    mapping* m = *pm;
    if (m->p != p) continue;
    unsigned me = (unsigned)getpid();
    for (int i = 0; i < MAPPERS; i++) {
      unsigned want = me;
      if (__atomic_compare_exchange_n(&m->ctl[i], &want, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) break;
    }
    munmap(m->ctl, 4096);
    *pm = m->next;
    free(m);
    return;
  }
}

/* The word after the mapper table: set once the exporter freed the allocation while it
 * was mapped (fakecudaFreeExported). */
#define FREED MAPPERS

void mark_freed(unsigned* ctl) { __atomic_store_n(&ctl[FREED], 1u, __ATOMIC_SEQ_CST); }

/* check_access is check_write and check_read: write says which. */
static void check_access(const void* p, size_t n, const char* what, int queued, int write) {
  for (mapping* m = g_mappings; m; m = m->next) {
    if ((const char*)p >= m->p + m->n || (const char*)p + n <= m->p) continue;
    if (__atomic_load_n(&m->ctl[FREED], __ATOMIC_SEQ_CST)) {
      if (write) g_strict.dead_peer_writes++;
      else g_strict.dead_peer_reads++;
      fault("%s %s device memory %p mapped (cuIpcOpenMemHandle) from process %d, which freed it (cudaFree: "
            "its allocator released the segment while this process mapped it): on a GPU that memory is gone",
            what, queued ? (write ? "is queued to write into" : "is queued to read") : (write ? "writes into" : "reads"),
            p, m->pid);
    }
    if (!m->dead && !alive(m->pid)) m->dead = 1;
    if (!m->dead) return;
    if (write) {
      g_strict.dead_peer_writes++;
    } else {
      g_strict.dead_peer_reads++;
    }
    fault("%s %s device memory %p mapped (cuIpcOpenMemHandle) from process %d, which has died: "
          "on a GPU that memory went with its context, and the access leaves a sticky error in this one",
          what, queued ? (write ? "is queued to write into" : "is queued to read") : (write ? "writes into" : "reads"), p,
          m->pid);
    return;
  }
}

int maker_dead(const void* p, size_t n) {
  alloc* a = find(p, n, 1);
  return a != NULL && a->maker > 0 && !alive(a->maker);
}

void check_write(const void* p, size_t n, const char* what, int queued) { check_access(p, n, what, queued, 1); }

void check_read(const void* p, size_t n, const char* what, int queued) { check_access(p, n, what, queued, 0); }

void check_no_mappers(const unsigned* ctl, const void* p) {
  unsigned me = (unsigned)getpid();
  for (int i = 0; i < MAPPERS; i++) {
    unsigned pid = __atomic_load_n(&ctl[i], __ATOMIC_SEQ_CST);
    if (pid != 0 && pid != me && alive((int)pid))
      fault("cuMemFree of exported device memory %p that process %u still maps (it has not called "
            "cuIpcCloseMemHandle): its streams may still read or write it",
            p, pid);
  }
}
