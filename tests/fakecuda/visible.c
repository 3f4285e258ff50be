/*
 * visible.c: which physical fake GPU an ordinal names (see strict.h). The real driver
 * numbers the GPUs CUDA_VISIBLE_DEVICES lets a process see from 0, so with a per-rank
 * CUDA_VISIBLE_DEVICES every rank's device 0 is a different GPU; the fake does the
 * same: CUDA_VISIBLE_DEVICES (a comma-separated list of physical indices 0-7; unset:
 * all, in order) maps ordinals to physical fake GPUs, whose bus ids
 * (cuDeviceGetPCIBusId, 0000:1N:00.0 for physical GPU N) and peer access are the
 * physical GPU's. Only ordinals index the per-process state (contexts, streams).
 */
#define _GNU_SOURCE
#include "strict.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { CUDA_ERROR_INVALID_DEVICE_ = 101 };

static int g_phys[NDEV];
static int g_nvisible = -1;

static void parse(void) {
  if (g_nvisible >= 0) return;
  const char* v = getenv("CUDA_VISIBLE_DEVICES");
  if (v == NULL) {
    for (int i = 0; i < NDEV; i++) g_phys[i] = i;
    g_nvisible = NDEV;
    return;
  }
  int n = 0;
  while (*v && n < NDEV) { /* as the driver: the list ends at the first entry it cannot read */
    char* end;
    long p = strtol(v, &end, 10);
    if (end == v || p < 0 || p >= NDEV) break;
    g_phys[n++] = (int)p;
    v = end;
    if (*v != ',') break;
    v++;
  }
  g_nvisible = n;
}

int physical(int ordinal) {
  parse();
  return ordinal >= 0 && ordinal < g_nvisible ? g_phys[ordinal] : ordinal;
}

int ordinal_of(int phys) {
  parse();
  for (int i = 0; i < g_nvisible; i++)
    if (g_phys[i] == phys) return i;
  return -1;
}

CUresult cuDeviceGetByPCIBusId(int* dev, const char* bus) {
  CALLED();
  if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  unsigned domain, b, slot, fn;
  if (dev == NULL || bus == NULL || sscanf(bus, "%x:%x:%x.%x", &domain, &b, &slot, &fn) != 4)
    return CUDA_ERROR_INVALID_VALUE;
  int o = (domain == 0 && slot == 0 && fn == 0 && b >= 0x10) ? ordinal_of((int)b - 0x10) : -1;
  if (o < 0) return CUDA_ERROR_INVALID_DEVICE_;
  *dev = o;
  return CUDA_SUCCESS;
}
