package ingress

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/internal/configerr"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/security"
)

// agent is the mesh session of one identity, swapped for a new one when
// the old one ends for good.
type agent struct {
	id Identity // as on the mesh (NodeIdentity)
	c  atomic.Pointer[client.Client]
	// life ends when the ingress closes or a reload removes the
	// identity: keep stops dialing.
	life context.Context
	end  context.CancelFunc
}

// drop ends a's session for good.
func (a *agent) drop() {
	a.end()
	a.c.Load().Close()
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
		case <-a.life.Done():
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
			case <-a.life.Done():
				return
			case <-time.After(wait):
			}
			wait = min(2*wait, redialMax)
			nc, err := in.cfg.Dial(a.life, a.id)
			if err == nil {
				a.c.Store(nc)
				if a.life.Err() != nil {
					nc.Close() // drop ran meanwhile and missed it
					return
				}
				break
			}
			in.cfg.Logger.Warn().Err(err).Str("agent", a.id.AgentID).Dur("retry_in", wait).Msg("the endpoint's mesh session cannot be opened")
		}
	}
}

// dialAll opens the session of each identity not yet held, and keeps it.
// On an error the sessions it opened stay (Close ends them).
func (in *Ingress) dialAll(ctx context.Context, ids []Identity) error {
	for _, id := range ids {
		if in.agent(id) != nil {
			continue
		}
		mesh := NodeIdentity(id, in.cfg.Node)
		if security.ValidateID(mesh.AgentID) != nil {
			return configerr.New(fieldKeys, "ingress: agent id %s-%s (the identity's id and the cluster node id) is longer than 128 characters: shorten the agent id in "+fieldKeys+" or "+fieldNode, id.AgentID, in.cfg.Node)
		}
		c, err := in.cfg.Dial(ctx, mesh)
		if err != nil {
			return fmt.Errorf("ingress: session of %s: %w", mesh.AgentID, err)
		}
		a := &agent{id: mesh}
		a.life, a.end = context.WithCancel(in.life)
		a.c.Store(c)
		in.agentsMu.Lock()
		closed := in.life.Err() != nil
		if !closed {
			in.agents[id] = a
			in.wg.Add(1)
		}
		in.agentsMu.Unlock()
		if closed {
			a.end()
			c.Close()
			return errors.New("ingress: closed")
		}
		go in.keep(a)
	}
	return nil
}

// SetKeys replaces the keys and their limits, as a reload of the keys
// file: requests in flight and open connections carry on, each key
// name's use so far counts under its new limits, and the session of an
// identity new to the file is dialed first. On an error (an ingress
// started without keys, a session that cannot be opened) nothing
// changes. An identity no longer listed loses its session: its requests
// in flight end (503 shutdown), and its keys are refused (401) from then
// on.
func (in *Ingress) SetKeys(ctx context.Context, k *Keys) error {
	in.reloadMu.Lock()
	defer in.reloadMu.Unlock()
	if in.keys.Load().Len() == 0 {
		return configerr.New(fieldKeys, "ingress: the endpoint started without keys (open); restart it to add "+fieldKeys)
	}
	if k.Len() == 0 {
		return configerr.New(fieldKeys, "ingress: "+fieldKeys+" with no key would open the endpoint; restart it without keys for that")
	}
	if err := in.dialAll(ctx, k.Identities()); err != nil {
		return err
	}
	in.metrics.names(k.names())
	in.quotas.update(k.names())
	in.keys.Store(k)
	in.dropUnlisted(k)
	return nil
}

// dropUnlisted ends the sessions of the identities k no longer lists: a
// key removed from the file takes its identity's agent off the mesh.
func (in *Ingress) dropUnlisted(k *Keys) {
	listed := map[Identity]bool{}
	for _, id := range k.Identities() {
		listed[id] = true
	}
	in.agentsMu.Lock()
	var gone []*agent
	for id, a := range in.agents {
		if !listed[id] {
			delete(in.agents, id)
			gone = append(gone, a)
		}
	}
	in.agentsMu.Unlock()
	for _, a := range gone {
		in.cfg.Logger.Info().Str("agent", a.id.AgentID).Msg("the keys file no longer lists this identity: its mesh session ends")
		a.drop()
	}
}
