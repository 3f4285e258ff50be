// Package termsig says whether SIGTERM still has its default action in this process:
// gonccl takes SIGTERM (to write its flight recorders before the process ends) only
// then, never over a handler the host program installed. It must stay tiny: one
// sigaction call through cgo, which reads the disposition without changing it.
package termsig

/*
#include <signal.h>
#include <stddef.h>

static int sigterm_is_default(void) {
	struct sigaction old;
	if (sigaction(SIGTERM, NULL, &old) != 0) {
		return 0;
	}
	return !(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_DFL;
}
*/
import "C"

// Default reports whether SIGTERM's action is the default one (end the process): no
// handler installed, and not ignored.
func Default() bool { return C.sigterm_is_default() != 0 }
