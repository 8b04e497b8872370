package cluster

import (
	"fmt"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// natsLog hands the embedded server's own reports to the node's log, so a
// route refused for its certificate ("certificate signed by unknown
// authority", "certificate has expired") or its password is said on the
// node that refused it. Its warnings and errors are warnings (a route to a
// node not up yet is one, and the daemon carries on), sampled so that a
// stranger retrying against the route port cannot flood the log; its
// notices (routes opening and closing) are debug-level. The server logs no
// payloads, and no route passwords.
type natsLog struct{ log, loud zerolog.Logger }

func newNATSLog(l zerolog.Logger) natsLog {
	l = l.With().Str("source", "nats-server").Logger()
	return natsLog{log: l, loud: l.Sample(&zerolog.BurstSampler{Burst: 10, Period: 10 * time.Second})}
}

func (n natsLog) Noticef(format string, v ...any) { n.log.Debug().Msg(fmt.Sprintf(format, v...)) }
func (n natsLog) Warnf(format string, v ...any) {
	// The daemon raises max_payload to its largest frame on purpose
	// (MaxMessage); the server's advice against it is not for the operator.
	if strings.HasPrefix(format, "Maximum payloads over") {
		return
	}
	n.loud.Warn().Msg(fmt.Sprintf(format, v...))
}
func (n natsLog) Errorf(format string, v ...any) { n.loud.Warn().Msg(fmt.Sprintf(format, v...)) }
func (n natsLog) Fatalf(format string, v ...any) { n.loud.Error().Msg(fmt.Sprintf(format, v...)) }
func (n natsLog) Debugf(format string, v ...any) {}
func (n natsLog) Tracef(format string, v ...any) {}
