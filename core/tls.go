package core

import (
	"fmt"

	"github.com/gonccl/gonccl/transport/tcp"
)

// logTLS says at INFO which certificate files this rank uses under GONCCL_TLS=1, and
// warns when its own certificate does not chain to its CA bundle (its peers, sharing
// that bundle, would refuse it at connect).
func logTLS(sec *tcp.TLS, logs loggers) {
	if sec == nil {
		return
	}
	logs.init.Info(sec.String())
	if err := sec.SignedByCA(); err != nil {
		logs.init.Warn(fmt.Sprintf("GONCCL_TLS: this rank's own %v under GONCCL_TLS_CA %s: peers using that CA will refuse it", err, sec.CAFile))
	}
}
