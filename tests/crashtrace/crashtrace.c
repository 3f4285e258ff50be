/*
 * crashtrace.c: preloaded (LD_PRELOAD) into every rank the test harness starts
 * (tests/_harness.py builds it), so that a rank that dies of SIGSEGV, SIGBUS, SIGFPE,
 * SIGILL or SIGABRT says where: the signal, the fault address, the thread, the
 * faulting instruction (library, nearest symbol, offset), the thread's native
 * backtrace, and every Python thread's traceback (what faulthandler prints, through the
 * same CPython function), then dies of the signal as before, leaving a core file in
 * $GONCCL_TEST_CORE_DIR (if the rlimit and /proc/sys/kernel/core_pattern allow one).
 *
 * Why a preload and not faulthandler: the handler must be installed before the Go
 * runtime starts (libgonccl.so is loaded when the first process group is created).
 * Go owns SIGSEGV/SIGBUS/SIGFPE and forwards a signal raised outside Go code (torch,
 * the CUDA driver, csrc, ctypes) to the handler that was there before it, which is
 * this one; a signal in Go code is Go's own (GOTRACEBACK=crash prints every goroutine,
 * then Go re-raises SIGABRT, which comes here). faulthandler enabled at startup
 * (PYTHONFAULTHANDLER) would do the Python part, but the workers' own
 * faulthandler.enable()/disable() after Go has started would then put SIG_DFL back in
 * place of Go's handlers. The constructor runs before Python starts, so nothing here
 * touches the workers' signal handling.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <link.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <ucontext.h>
#include <unistd.h>

typedef const char* (*dump_fn)(int fd, void* interp, void* tstate);

static dump_fn dump_python;
static char core_dir[1024];
static volatile sig_atomic_t busy;
static const int kSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};

static void put(const char* s) {
  size_t n = strlen(s);
  while (n > 0) {
    ssize_t w = write(2, s, n);
    if (w <= 0) return;
    s += w;
    n -= (size_t)w;
  }
}

static void put_hex(uintptr_t v) {
  char buf[2 + 2 * sizeof v + 1];
  char* p = buf + sizeof buf - 1;
  *p = 0;
  do {
    *--p = "0123456789abcdef"[v & 15];
    v >>= 4;
  } while (v);
  *--p = 'x';
  *--p = '0';
  put(p);
}

static void put_dec(long v) {
  char buf[24];
  char* p = buf + sizeof buf - 1;
  *p = 0;
  int neg = v < 0;
  unsigned long u = neg ? 0UL - (unsigned long)v : (unsigned long)v;
  do {
    *--p = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  if (neg) *--p = '-';
  put(p);
}

static const char* name_of(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGABRT: return "SIGABRT";
  }
  return "signal";
}

/* where prints pc as "library (symbol+offset) [pc]". dladdr is not async-signal-safe,
 * but the process is dying and this is the line that names the frame. */
static void where(uintptr_t pc) {
  Dl_info info;
  memset(&info, 0, sizeof info);
  if (pc != 0 && dladdr((void*)pc, &info) != 0) {
    put(info.dli_fname ? info.dli_fname : "?");
    put(" (");
    put(info.dli_sname ? info.dli_sname : "?");
    put("+");
    put_hex(pc - (uintptr_t)(info.dli_saddr ? info.dli_saddr : info.dli_fbase));
    put(", library offset ");
    put_hex(pc - (uintptr_t)info.dli_fbase);
    put(") ");
  }
  put("[");
  put_hex(pc);
  put("]\n");
}

/* is_code: addr is in an executable segment of a loaded object. */
static uintptr_t probe;
static int in_text(struct dl_phdr_info* info, size_t size, void* found) {
  (void)size;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr)* ph = &info->dlpi_phdr[i];
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
    if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X) && probe >= lo && probe < lo + ph->p_memsz) {
      *(int*)found = 1;
      return 1;
    }
  }
  return 0;
}

static int is_code(uintptr_t addr) {
  int found = 0;
  probe = addr;
  dl_iterate_phdr(in_text, &found);
  return found;
}

/* scan prints the words of the faulting thread's stack, from its stack pointer up,
 * that point into a function of a loaded library: the likely return addresses of the
 * faulting frame's callers, where the unwinder cannot get past Go's signal trampoline
 * or a library without unwind tables. Read with process_vm_readv, which fails instead
 * of faulting past the end of the stack. */
static void scan(uintptr_t sp) {
  static uintptr_t words[2048];
  struct iovec local = {words, sizeof words}, remote = {(void*)sp, sizeof words};
  ssize_t n = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
  for (size_t size = sizeof words / 2; n < 0 && size >= 512; size /= 2) {
    local.iov_len = remote.iov_len = size;
    n = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
  }
  if (n <= 0) return;
  put("==== crashtrace: code addresses on that thread's stack (likely callers, innermost first):\n");
  int shown = 0;
  for (size_t i = 0; i < (size_t)n / sizeof words[0] && shown < 32; i++) {
    Dl_info info;
    memset(&info, 0, sizeof info);
    if (words[i] < 4096 || !is_code(words[i]) || dladdr((void*)words[i], &info) == 0) continue;
    put("  sp+");
    put_hex(i * sizeof words[0]);
    put(": ");
    where(words[i]);
    shown++;
  }
}

static void handler(int sig, siginfo_t* info, void* uctx) {
  if (busy) { /* crashed while reporting: just die */
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  busy = 1;
  char thread[17] = {0};
  prctl(PR_GET_NAME, thread, 0, 0, 0);
  put("\n==== crashtrace: fatal ");
  put(name_of(sig));
  if (sig != SIGABRT) {
    put(" (fault address ");
    put_hex((uintptr_t)info->si_addr);
    put(")");
  }
  put(" in process ");
  put_dec((long)getpid());
  put(", thread ");
  put_dec((long)syscall(SYS_gettid));
  put(" '");
  put(thread);
  put("'\n");
  uintptr_t pc = 0, sp = 0;
#if defined(__x86_64__)
  if (uctx != NULL) {
    pc = (uintptr_t)((ucontext_t*)uctx)->uc_mcontext.gregs[REG_RIP];
    sp = (uintptr_t)((ucontext_t*)uctx)->uc_mcontext.gregs[REG_RSP];
  }
#elif defined(__aarch64__)
  if (uctx != NULL) {
    pc = (uintptr_t)((ucontext_t*)uctx)->uc_mcontext.pc;
    sp = (uintptr_t)((ucontext_t*)uctx)->uc_mcontext.sp;
  }
#endif
  if (pc != 0) {
    put("==== crashtrace: faulting instruction: ");
    where(pc);
  }
  put("==== crashtrace: native backtrace of that thread (through the signal handlers):\n");
  void* frames[64];
  int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, 2);
  if (sp != 0) scan(sp);
  if (dump_python != NULL) {
    put("==== crashtrace: Python threads (most recent call first):\n");
    dump_python(2, NULL, NULL);
  }
  if (core_dir[0] != 0 && chdir(core_dir) == 0) {
    put("==== crashtrace: a core file, if the kernel writes one, goes to ");
    put(core_dir);
    put(" (see /proc/sys/kernel/core_pattern)\n");
  }
  put("==== crashtrace: end\n");
  /* The default action: a core file and death by the signal. */
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigaction(sig, &dfl, NULL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  pthread_sigmask(SIG_UNBLOCK, &set, NULL);
  raise(sig);
}

__attribute__((constructor)) static void crashtrace_init(void) {
  const char* off = getenv("GONCCL_TEST_CRASHTRACE");
  if (off != NULL && strcmp(off, "0") == 0) return;
  const char* dir = getenv("GONCCL_TEST_CORE_DIR");
  if (dir != NULL && strlen(dir) < sizeof core_dir) strcpy(core_dir, dir);
  void* warm[4];
  backtrace(warm, 4); /* loads the unwinder now, not in the handler */
  dump_python = (dump_fn)dlsym(RTLD_DEFAULT, "_Py_DumpTracebackThreads");
  static char altstack[64 * 1024];
  stack_t ss;
  memset(&ss, 0, sizeof ss);
  ss.ss_sp = altstack;
  ss.ss_size = sizeof altstack;
  sigaltstack(&ss, NULL); /* this (the main) thread: a stack overflow is reported too */
  for (size_t i = 0; i < sizeof kSignals / sizeof kSignals[0]; i++) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(kSignals[i], &sa, NULL);
  }
}
