package router

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestConcurrentDaemon plays the daemon with real goroutines: requesters
// send requests by model and by address, providers answer with stream
// chunks and END, providers are removed and replaced while requests are in
// flight, requesters leave with requests outstanding, and full provider
// queues are undone with Abort. Every request a live requester made must
// end exactly once (END, a refusal, agent_gone or an abort), chunks must
// arrive in order, and once everyone has left nothing may remain.

type simKind uint8

const (
	simDelivery simKind = iota // to a provider: id is the delivery id
	simChunk                   // to a requester: reply without END
	simEnd                     // to a requester: reply with END
	simFailed                  // to a requester: agent_gone or queue_full
)

type simMsg struct {
	kind   simKind
	id     uint64 // delivery id (to providers) or request id (to requesters)
	seq    int    // chunk number
	chunks int    // chunks the provider is to send before END
}

type simSession struct {
	name     string
	inbox    chan simMsg
	stop     chan struct{}
	stopOnce sync.Once
}

// halt tells a provider's goroutine to leave; it removes its own session,
// as the daemon's reader does when its connection ends.
func (s *simSession) halt() { s.stopOnce.Do(func() { close(s.stop) }) }

type simulation struct {
	t      *testing.T
	r      *Router[*simSession]
	failed atomic.Bool

	mu        sync.Mutex // guards providers
	providers []*Session[*simSession]

	providerWG    sync.WaitGroup
	orphans       atomic.Uint64
	requesterGone atomic.Uint64
	aborted       atomic.Uint64
	abortsTooLate atomic.Uint64 // Abort after the provider's Remove
}

const (
	simProviders      = 4
	simRequesters     = 4
	simRequests       = 3000 // per requester, over all its registrations
	simWindow         = 8    // requests a requester keeps in flight
	simPerSession     = 500  // requests before a requester re-registers
	simMaxDeliveries  = 8
	simProviderQueue  = 5 // below simMaxDeliveries, so that Abort is exercised
	simRequesterQueue = simWindow*4 + 16
	simTimeout        = 20 * time.Second
)

func (sim *simulation) errorf(format string, args ...any) {
	sim.failed.Store(true)
	sim.t.Errorf(format, args...)
}

// push hands msg to s without blocking; a full queue is the daemon's
// queue_full case.
func push(s *simSession, msg simMsg) bool {
	select {
	case s.inbox <- msg:
		return true
	default:
		return false
	}
}

// tellOrphans sends agent_gone for every orphan.
func (sim *simulation) tellOrphans(orphans []Orphan[*simSession]) {
	sim.orphans.Add(uint64(len(orphans)))
	for _, o := range orphans {
		if !push(o.Requester.Value(), simMsg{kind: simFailed, id: o.RequestID}) && !o.Requester.Closed() {
			sim.errorf("a live requester's queue overflowed with an orphan")
		}
	}
}

func (sim *simulation) startProvider(i int) {
	ss := &simSession{name: fmt.Sprintf("p%d", i), inbox: make(chan simMsg, simProviderQueue), stop: make(chan struct{})}
	s, replaced, err := sim.r.Register("", ss.name, []string{"m"}, ss)
	if err != nil {
		sim.errorf("Register: %v", err)
		return
	}
	if replaced != nil {
		replaced.Value().halt() // the daemon's CLOSE REPLACED
	}
	sim.mu.Lock()
	sim.providers[i] = s
	sim.mu.Unlock()
	sim.providerWG.Go(func() { sim.serve(s) })
}

func (sim *simulation) serve(s *Session[*simSession]) {
	ss := s.Value()
	// Orphans come from Remove here, after the last routed reply was
	// handed on, so no requester sees a reply after its agent_gone.
	defer func() { sim.tellOrphans(sim.r.Remove(s)) }()
	for {
		var msg simMsg
		select {
		case msg = <-ss.inbox:
		case <-ss.stop:
			return
		}
		for seq := 0; seq <= msg.chunks; seq++ {
			end := seq == msg.chunks
			rep, err := sim.r.RouteReply(s, msg.id, end)
			switch {
			case errors.Is(err, ErrRequesterGone):
				sim.requesterGone.Add(1)
				continue
			case err != nil:
				sim.errorf("%s: RouteReply(%d): %v", ss.name, msg.id, err)
				return
			}
			kind := simChunk
			if end {
				kind = simEnd
			}
			if !push(rep.Requester.Value(), simMsg{kind: kind, id: rep.RequestID, seq: seq}) && !rep.Requester.Closed() {
				sim.errorf("a live requester's queue overflowed with a reply")
			}
		}
	}
}

func (sim *simulation) churn(stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(7, 7))
	for {
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(200+rng.IntN(800)) * time.Microsecond):
		}
		i := rng.IntN(simProviders)
		if rng.IntN(2) == 0 {
			// Leave, and come back at once: the old session may still be
			// registered, then the new one replaces it.
			sim.mu.Lock()
			old := sim.providers[i]
			sim.mu.Unlock()
			old.Value().halt()
		}
		sim.startProvider(i)
	}
}

func (sim *simulation) requester(n int) {
	rng := rand.New(rand.NewPCG(uint64(n), 99))
	sent := 0
	for reg := 0; sent < simRequests && !sim.failed.Load(); reg++ {
		ss := &simSession{name: fmt.Sprintf("r%d", n), inbox: make(chan simMsg, simRequesterQueue)}
		s, _, err := sim.r.Register("", ss.name, nil, ss)
		if err != nil {
			sim.errorf("Register: %v", err)
			return
		}
		chunks := make(map[uint64]int) // outstanding request id → chunks seen
		nextID := uint64(1)
		for perSession := 0; (perSession < simPerSession || len(chunks) > 0) && sent < simRequests; {
			if perSession < simPerSession && len(chunks) < simWindow {
				req := Request{ID: nextID, Channel: nextID % 5, Model: []byte("m"), HasRoutingHeader: true}
				if rng.IntN(3) == 0 {
					req.Peer = []byte(fmt.Sprintf("p%d", rng.IntN(simProviders)))
				}
				nextID++
				perSession++
				sent++
				want := rng.IntN(3)
				d, err := sim.r.RouteRequest(s, req)
				switch {
				case errors.Is(err, ErrProviderBusy), errors.Is(err, ErrUnknownAgent), errors.Is(err, ErrNoRoute):
					continue // ended by the refusal
				case err != nil:
					sim.errorf("%s: RouteRequest: %v", ss.name, err)
					return
				}
				chunks[req.ID] = 0
				if !push(d.Provider.Value(), simMsg{kind: simDelivery, id: d.ID, chunks: want}) {
					rep, err := sim.r.Abort(d.Provider, d.ID)
					switch {
					case err == nil:
						if rep.Requester != s || rep.RequestID != req.ID || rep.Channel != req.Channel {
							sim.errorf("Abort returned %+v for request %d", rep, req.ID)
						}
						sim.aborted.Add(1)
						delete(chunks, req.ID)
					case errors.Is(err, ErrSessionClosed):
						// The provider left: agent_gone is on its way.
						sim.abortsTooLate.Add(1)
					default:
						sim.errorf("Abort: %v", err)
					}
				}
				// Leave mid-flight now and then.
				if len(chunks) > 0 && rng.IntN(150) == 0 {
					break
				}
				continue
			}
			var msg simMsg
			select {
			case msg = <-ss.inbox:
			case <-time.After(simTimeout):
				sim.errorf("%s: no reply for %d outstanding requests in %v", ss.name, len(chunks), simTimeout)
				return
			}
			seen, ok := chunks[msg.id]
			if !ok {
				sim.errorf("%s: message %+v for a request that is not outstanding", ss.name, msg)
				return
			}
			switch msg.kind {
			case simChunk:
				if msg.seq != seen {
					sim.errorf("%s: chunk %d of request %d arrived after %d chunks", ss.name, msg.seq, msg.id, seen)
				}
				chunks[msg.id] = seen + 1
			case simEnd:
				if msg.seq != seen {
					sim.errorf("%s: END of request %d after %d chunks, want %d", ss.name, msg.id, seen, msg.seq)
				}
				delete(chunks, msg.id)
			case simFailed:
				delete(chunks, msg.id)
			}
		}
		if len(chunks) == 0 && s.Requests() != 0 {
			sim.errorf("%s: router still has %d requests outstanding", ss.name, s.Requests())
		}
		sim.tellOrphans(sim.r.Remove(s))
	}
}

func TestConcurrentDaemon(t *testing.T) {
	sim := &simulation{
		t:         t,
		r:         New[*simSession](Config{MaxRequests: simWindow, MaxDeliveries: simMaxDeliveries}),
		providers: make([]*Session[*simSession], simProviders),
	}
	for i := range simProviders {
		sim.startProvider(i)
	}
	stopChurn := make(chan struct{})
	var churnWG sync.WaitGroup
	churnWG.Go(func() { sim.churn(stopChurn) })

	var reqWG sync.WaitGroup
	for n := range simRequesters {
		reqWG.Go(func() { sim.requester(n) })
	}
	reqWG.Wait()
	close(stopChurn)
	churnWG.Wait()

	// Requesters that left mid-flight leave deliveries the providers still
	// answer (into the void); wait for those to finish.
	deadline := time.Now().Add(simTimeout)
	for sim.r.Stats().Pending != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if p := sim.r.Stats().Pending; p != 0 {
		t.Errorf("%d deliveries still pending after every requester finished", p)
	}
	orphansBefore := sim.orphans.Load()
	for _, s := range sim.providers {
		s.Value().halt()
	}
	sim.providerWG.Wait()
	if n := sim.orphans.Load() - orphansBefore; n != 0 {
		t.Errorf("removing idle providers returned %d orphans", n)
	}

	st := sim.r.Stats()
	if st.Sessions != 0 || st.Retiring != 0 || st.Models != 0 || st.Pending != 0 {
		t.Errorf("after everyone left: %+v", st)
	}
	if !sim.r.empty() {
		t.Errorf("registry not empty")
	}
	checks := []struct {
		reason Reason
		want   uint64
	}{
		{ErrAgentGone, sim.orphans.Load()},
		{ErrRequesterGone, sim.requesterGone.Load()},
		{ErrUnknownRequest, 0},
		{ErrDuplicateRequest, 0},
		{ErrTooManyRequests, 0},
		{ErrBadFrame, 0},
		{ErrSessionClosed, sim.abortsTooLate.Load()},
	}
	for _, c := range checks {
		if st.Failures[c.reason] != c.want {
			t.Errorf("Failures[%s] = %d, want %d", c.reason, st.Failures[c.reason], c.want)
		}
	}
	counts := ""
	for _, reason := range Reasons() {
		counts += fmt.Sprintf(" %s=%d", reason.Code(), st.Failures[reason])
	}
	t.Logf("failures:%s; aborted %d", counts, sim.aborted.Load())
	if sim.aborted.Load() == 0 || st.Failures[ErrAgentGone] == 0 || st.Failures[ErrRequesterGone] == 0 {
		t.Log("warning: a path was not exercised this run")
	}
}
