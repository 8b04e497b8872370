package ingress

import (
	"context"
	"errors"
	"time"

	"github.com/m2md/m2md/client"
)

// replyWait bounds each wait for a reply by Config.Timeout: the first (a
// non-streamed answer, or a stream's first chunk) and each next chunk of a
// stream. A stream whose chunks keep coming runs as long as it lasts; one
// whose provider falls silent for Timeout ends (and the provider gets
// CANCEL). The request's context ends with context.DeadlineExceeded as its
// cause when the wait runs out.
type replyWait struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	t      *time.Timer
	d      time.Duration
}

func newReplyWait(parent context.Context, d time.Duration) *replyWait {
	ctx, cancel := context.WithCancelCause(parent)
	w := &replyWait{ctx: ctx, cancel: cancel, d: d}
	w.t = time.AfterFunc(d, func() { cancel(context.DeadlineExceeded) })
	return w
}

// next waits for the stream's next reply, within Timeout.
func (w *replyWait) next(st *client.Stream) ([]byte, bool, error) {
	w.t.Reset(w.d)
	b, final, err := st.Next()
	w.t.Stop()
	return b, final, w.why(err)
}

// why is err, or context.DeadlineExceeded when the wait ran out: the
// client reports the ended context as it sees it.
func (w *replyWait) why(err error) error {
	if err != nil && errors.Is(context.Cause(w.ctx), context.DeadlineExceeded) {
		return context.DeadlineExceeded
	}
	return err
}

// stop ends the request's context.
func (w *replyWait) stop() {
	w.t.Stop()
	w.cancel(nil)
}
