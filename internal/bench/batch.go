package bench

import (
	"context"

	"github.com/m2md/m2md/transport"
)

// batchMax bounds how many already-received messages an agent answers
// inside one Cork, so a long backlog still leaves in steady pieces.
const batchMax = 64

// polled is a context that has ended: Receive with it returns a message
// that has already arrived, or at once the context's error.
var polled = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// receiveBatches runs an agent's receive loop: it waits for a message,
// then handles it and every message already received (at most batchMax)
// inside one Cork of conn, so that what the handler sends on conn leaves
// in one system call (WebSocket), as the daemon's writer does. It never
// waits for more messages to arrive. handle owns the message (it must
// Release it); an error from handle or Receive ends the loop.
func receiveBatches(ctx context.Context, conn transport.Conn, handle func(transport.Message) error) error {
	for {
		msg, err := conn.Receive(ctx)
		if err != nil {
			return err
		}
		conn.Cork()
		err = handle(msg)
		for n := 1; err == nil && n < batchMax; n++ {
			if msg, err = conn.Receive(polled); err != nil {
				if err == context.Canceled {
					err = nil
				}
				break
			}
			err = handle(msg)
		}
		// A failed batch write is the connection's end, which the next
		// Receive reports.
		_ = conn.Uncork()
		if err != nil {
			return err
		}
	}
}
