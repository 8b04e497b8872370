package ingress

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/negotiate"
)

// agent is the mesh session of one identity, swapped for a new one when
// the old one ends for good.
type agent struct {
	id Identity // as on the mesh (NodeIdentity)
	c  atomic.Pointer[client.Client]
}

// Bounds of the wait between two dials of an identity whose session ended.
const (
	redialMin = 100 * time.Millisecond
	redialMax = 5 * time.Second
)

// keep dials a's session again whenever it ends for good while the
// ingress runs. A client gives up on its own only when another session
// took its agent id (CLOSE REPLACED, which a client must not answer by
// reconnecting on its own) or on a permanent refusal: the endpoint is
// the id's rightful holder, so it claims the id back instead of staying
// down until a restart. Without org secrets the daemon lets a session
// from the holder's own address replace the holder, so the ingress, on
// loopback, wins the id back from any local claimant.
func (in *Ingress) keep(a *agent) {
	defer in.wg.Done()
	wait := redialMin
	for {
		c, since := a.c.Load(), time.Now()
		select {
		case <-in.life.Done():
			return
		case <-c.Done():
		}
		if time.Since(since) > redialMax {
			wait = redialMin
		}
		var ce *negotiate.CloseError
		if errors.As(c.Err(), &ce) && ce.Reason == negotiate.ReasonReplaced {
			in.cfg.Logger.Warn().Str("agent", a.id.AgentID).Msg("another session claimed the endpoint's agent id; claiming it back")
		} else {
			in.cfg.Logger.Warn().Err(c.Err()).Str("agent", a.id.AgentID).Msg("the endpoint's mesh session ended; dialing again")
		}
		// A session that ends soon after it began (a claimant that
		// keeps claiming) is dialed again ever more slowly.
		for {
			select {
			case <-in.life.Done():
				return
			case <-time.After(wait):
			}
			wait = min(2*wait, redialMax)
			nc, err := in.cfg.Dial(in.life, a.id)
			if err == nil {
				a.c.Store(nc)
				if in.life.Err() != nil {
					nc.Close() // Close ran meanwhile and missed it
					return
				}
				break
			}
			in.cfg.Logger.Warn().Err(err).Str("agent", a.id.AgentID).Dur("retry_in", wait).Msg("the endpoint's mesh session cannot be opened")
		}
	}
}
