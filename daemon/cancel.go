package daemon

import (
	"errors"
	"time"

	"github.com/m2md/m2md/internal/bufpool"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// handleCancel acts on a requester's CANCEL (docs/protocol.md §4.1): the
// router frees the request and its delivery at once, the requester gets the
// final reply `cancelled` on the request's channel, and the provider, if it
// negotiated the feature, a CANCEL behind the request on the delivery's
// channel. A CANCEL that finds no outstanding request on its channel (the
// END won the race) is ignored.
func (se *session) handleCancel(msg transport.Message) {
	id, err := negotiate.ParseCancel(msg.Data)
	ch := msg.Channel
	msg.Release()
	switch {
	case !se.neg.Params.Has(negotiate.FeatureCancel):
		se.protocolError("CANCEL in a session that did not negotiate feature cancel")
		return
	case ch == transport.ControlChannel && se.transport == "quic":
		se.protocolError("CANCEL on the control stream")
		return
	case err != nil:
		se.protocolError("malformed CANCEL")
		return
	}
	se.mu.Lock()
	_, err = se.machine.Received(time.Now(), negotiate.KindCancel, "")
	se.mu.Unlock()
	if err != nil {
		if !errors.Is(err, negotiate.ErrAfterClose) && !errors.Is(err, negotiate.ErrClosed) {
			se.protocolError("CANCEL not allowed now")
		}
		return
	}
	srv := se.srv
	c, err := srv.router.Cancel(se.rs, id, uint64(ch))
	if err != nil {
		srv.metrics.cancels.WithLabelValues("not_outstanding").Inc()
		return
	}
	srv.reqm.ended(c.Mark, outcomeCancelled)
	prov := c.Provider.Value()
	se.sendError(ch, id, 0, negotiate.CodeCancelled, "request cancelled", prov.name())
	prov.takeCancel(c.DeliveryID, c.ProviderChannel)
}

// takeCancel sends the agent, a provider, CANCEL of its delivery, behind
// the request on the delivery's channel, if it negotiated the feature.
func (se *session) takeCancel(deliveryID, channel uint64) {
	srv := se.srv
	if !se.neg.Params.Has(negotiate.FeatureCancel) {
		// Its replies to the delivery are dropped as unknown (counted in
		// m2md_routing_failures_total{reason="unknown_request"}); its END
		// returns the channel to the pool as it always does.
		srv.metrics.cancels.WithLabelValues("provider_without_cancel").Inc()
		return
	}
	p := bufpool.Get(negotiate.MaxCancelLen)
	*p, _ = negotiate.AppendCancel((*p)[:0], deliveryID)
	if !se.enqueue(outMsg{ch: transport.ChannelID(channel), buf: p, kind: msgCancel}) {
		bufpool.Put(p)
		srv.metrics.cancels.WithLabelValues("provider_queue_full").Inc()
		return
	}
	srv.metrics.cancels.WithLabelValues("forwarded").Inc()
}
