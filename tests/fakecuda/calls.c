/*
 * calls.c: how many times each driver entry point was called, so that a test can hold a
 * path to the calls it makes (the default path's list is in docs/gpu.md). Every entry
 * point counts itself first (CALLED, fakecuda_internal.h); calls a test hook makes
 * (t_hook) are not counted. fakecudaCallCounts (fakecuda_strict.h) reads the counts;
 * with FAKECUDA_CALL_COUNTS=prefix set, each process writes its own at exit to
 * prefix.<pid>, one "name count" line per entry point called, for tests of other
 * processes.
 */
#define _GNU_SOURCE
#include "strict.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_ENTRIES 128

typedef struct {
  const char* name; /* a string literal (__func__): compared by content */
  long n;
} call_count;

static call_count g_calls[MAX_ENTRIES];
static int g_ncalls;
static pthread_mutex_t calls_mu = PTHREAD_MUTEX_INITIALIZER;

void fake_called(const char* fn) {
  if (t_hook) return;
  pthread_mutex_lock(&calls_mu);
  int i = 0;
  while (i < g_ncalls && strcmp(g_calls[i].name, fn) != 0) i++;
  if (i == g_ncalls && g_ncalls < MAX_ENTRIES) g_calls[g_ncalls++] = (call_count){fn, 0};
  if (i < g_ncalls) g_calls[i].n++;
  pthread_mutex_unlock(&calls_mu);
}

int fakecudaCallCounts(char* buf, size_t n) {
  pthread_mutex_lock(&calls_mu);
  size_t off = 0;
  int need = 0;
  for (int i = 0; i < g_ncalls; i++) {
    int w = snprintf(buf != NULL && off < n ? buf + off : NULL, buf != NULL && off < n ? n - off : 0, "%s %ld\n",
                     g_calls[i].name, g_calls[i].n);
    off += (size_t)w;
    need += w;
  }
  pthread_mutex_unlock(&calls_mu);
  return need + 1;
}

static void write_counts(void) {
  const char* prefix = getenv("FAKECUDA_CALL_COUNTS");
  if (prefix == NULL || *prefix == '\0') return;
  char path[4096];
  snprintf(path, sizeof path, "%s.%d", prefix, (int)getpid());
  FILE* f = fopen(path, "w");
  if (f == NULL) return;
  pthread_mutex_lock(&calls_mu);
  for (int i = 0; i < g_ncalls; i++) fprintf(f, "%s %ld\n", g_calls[i].name, g_calls[i].n);
  pthread_mutex_unlock(&calls_mu);
  fclose(f);
}

__attribute__((constructor)) static void calls_init(void) { atexit(write_counts); }
