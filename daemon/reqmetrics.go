package daemon

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/router"
)

// Per-model request metrics: how long each (model, provider) pair takes to
// answer, to its first reply, how requests ended and the tokens the answers
// counted. They are kept on the node of the requester (where a request
// enters the mesh), so that a cluster counts each request once and its
// latency includes the hop to another node.
//
// Models and providers are named by agents, so their label values are
// capped: the first maxModelLabels models and maxProviderLabels providers
// seen keep their names, later ones are counted as "other", and at most
// maxPairLabels (model, provider) pairs have series of their own; later
// pairs are counted under model="other", provider="other"
// (docs/operations.md, "Per-model metrics").
const (
	maxModelLabels    = 64
	maxProviderLabels = 256
	maxPairLabels     = 256
	labelOther        = "other"
)

// Outcomes of m2md_model_requests_total. The first four end a routed
// request; unrouted is a request no provider took (provider="").
const (
	outcomeOK        = iota // its final reply (not an error frame) reached the requester
	outcomeError            // the provider's final reply was an error frame
	outcomeCancelled        // the requester cancelled it, or left before its end
	outcomeFailed           // the daemon ended it: provider lost, queue full, too large...
	numOutcomes
)

var outcomeLabels = [numOutcomes]string{"ok", "error", "cancelled", "failed"}

const outcomeUnrouted = "unrouted"

// markHeaders is set in a delivery's mark once its first reply was a
// headers reply (docs/protocol.md §4.7), which is no chunk of the answer:
// the stream's first chunk is then its second reply.
const markHeaders = 1 << 31

// requestBuckets spans what a model takes: a cached embedding in
// milliseconds to a long generation in minutes.
var requestBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// pairSeries are one (model, provider) pair's collectors, resolved once.
type pairSeries struct {
	duration, ttfc      prometheus.Observer
	ended               [numOutcomes]prometheus.Counter
	tokensIn, tokensOut prometheus.Counter
}

// providerMarks is a provider session's marks, one per model it serves
// (router.Session.Models, in that order), and other's: model "other", for
// requests addressed to it that name no model it registered, resolved on
// the first such request.
type providerMarks struct {
	marks []uint32
	other atomic.Uint32
}

type requestMetrics struct {
	duration, ttfc *prometheus.HistogramVec
	requests       *prometheus.CounterVec
	tokens         *prometheus.CounterVec

	mu        sync.Mutex
	models    map[string]struct{}
	providers map[string]struct{}
	pairs     map[[2]string]uint32
	unrouted  map[string]prometheus.Counter // by model label
	n         uint32
	// table is indexed by mark (0: not counted). An entry is written once,
	// under mu, before its mark is handed out; the mark reaches a reader
	// through the router's locks or through providerMarks' atomic pointer.
	table [maxPairLabels + 2]*pairSeries
}

func newRequestMetrics(reg prometheus.Registerer) *requestMetrics {
	r := &requestMetrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "m2md_model_request_duration_seconds", Help: "Time from a request's routing to its final reply back on this node, by model and provider (the agent id), for requests that ended with a reply (outcome ok or error).",
			Buckets: requestBuckets,
		}, []string{"model", "provider"}),
		ttfc: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "m2md_model_time_to_first_chunk_seconds", Help: "Time from a streamed request's routing to its first chunk back on this node, by model and provider (an answer in one reply is timed by m2md_model_request_duration_seconds alone).",
			Buckets: requestBuckets,
		}, []string{"model", "provider"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "m2md_model_requests_total", Help: "Requests made by this node's agents, by model, provider and outcome: ok, error (the provider answered with an error), cancelled (the requester cancelled or left), failed (the daemon ended it: provider lost, queue full, too large), unrouted (no provider took it; provider is empty).",
		}, []string{"model", "provider", "outcome"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "m2md_model_tokens_total", Help: "Tokens the answers' M2M response headers counted (non-streamed answers), by model, provider and type: input (prompt) or output (completion).",
		}, []string{"model", "provider", "type"}),
		models:    map[string]struct{}{},
		providers: map[string]struct{}{},
		pairs:     map[[2]string]uint32{},
		unrouted:  map[string]prometheus.Counter{},
	}
	reg.MustRegister(r.duration, r.ttfc, r.requests, r.tokens)
	return r
}

// label is v, or "other" once set holds max values or, unless add, when v
// is not in set already.
func label(set map[string]struct{}, v string, max int, add bool) string {
	if _, ok := set[v]; ok {
		return v
	}
	if !add || len(set) >= max {
		return labelOther
	}
	set[v] = struct{}{}
	return v
}

// pairLocked returns the mark of (model, provider), making its series. A
// model gets a label of its own only when a provider registers it
// (newModel): requesters name any model they like.
func (r *requestMetrics) pairLocked(model, provider string, newModel bool) uint32 {
	k := [2]string{label(r.models, model, maxModelLabels, newModel), label(r.providers, provider, maxProviderLabels, true)}
	if i, ok := r.pairs[k]; ok {
		return i
	}
	if r.n >= maxPairLabels {
		k = [2]string{labelOther, labelOther}
		if i, ok := r.pairs[k]; ok {
			return i
		}
	}
	r.n++
	s := &pairSeries{
		duration:  r.duration.WithLabelValues(k[0], k[1]),
		ttfc:      r.ttfc.WithLabelValues(k[0], k[1]),
		tokensIn:  r.tokens.WithLabelValues(k[0], k[1], "input"),
		tokensOut: r.tokens.WithLabelValues(k[0], k[1], "output"),
	}
	for i, o := range outcomeLabels {
		s.ended[i] = r.requests.WithLabelValues(k[0], k[1], o)
	}
	r.unroutedLocked(k[0])
	r.table[r.n] = s
	r.pairs[k] = r.n
	return r.n
}

func (r *requestMetrics) unroutedLocked(model string) prometheus.Counter {
	c, ok := r.unrouted[model]
	if !ok {
		c = r.requests.WithLabelValues(model, "", outcomeUnrouted)
		r.unrouted[model] = c
	}
	return c
}

// marksOf returns the marks of provider p (registered as rs), resolving
// them on first use: called when the provider registers, so that its
// series exist at zero, and from the hot path, which may see it first.
func (r *requestMetrics) marksOf(p peer, rs *router.Session[peer]) *providerMarks {
	slot := p.marksSlot()
	if pm := slot.Load(); pm != nil {
		return pm
	}
	pm := &providerMarks{marks: make([]uint32, len(rs.Models()))}
	r.mu.Lock()
	for i, m := range rs.Models() {
		pm.marks[i] = r.pairLocked(m, rs.AgentID(), true)
	}
	r.mu.Unlock()
	if !slot.CompareAndSwap(nil, pm) {
		return slot.Load()
	}
	return pm
}

// mark is the router's Marker: the mark of a request for the provider's
// model-th model, 0 when the requester is another node's (that node counts
// it). A request naming no model the provider registered (an addressed
// one) counts as model "other".
func (r *requestMetrics) mark(requester, provider *router.Session[peer], model int) uint32 {
	if _, local := requester.Value().(*session); !local {
		return 0
	}
	pm := r.marksOf(provider.Value(), provider)
	if model >= 0 && model < len(pm.marks) {
		return pm.marks[model]
	}
	if m := pm.other.Load(); m != 0 {
		return m
	}
	r.mu.Lock()
	m := r.pairLocked(labelOther, provider.AgentID(), false)
	r.mu.Unlock()
	pm.other.Store(m)
	return m
}

// series returns the series of mark, nil for 0 (a request this node does
// not count: its requester is on another node).
func (r *requestMetrics) series(mark uint32) *pairSeries {
	mark &^= markHeaders
	if mark == 0 || mark > maxPairLabels+1 {
		return nil
	}
	return r.table[mark]
}

// refused counts a request for model that no provider took; a model no
// provider has registered is counted as "other".
func (r *requestMetrics) refused(model []byte) {
	r.mu.Lock()
	c := r.unroutedLocked(label(r.models, string(model), maxModelLabels, false))
	r.mu.Unlock()
	c.Inc()
}

// ended counts a routed request's end other than by a reply.
func (r *requestMetrics) ended(mark uint32, outcome int) {
	if s := r.series(mark); s != nil {
		s.ended[outcome].Inc()
	}
}

// replied counts a reply that arrived at this node at (the read loop's
// clock, so that the hot path reads no clock of its own) and reached (code
// "") or failed to reach its requester: a stream's first chunk is its time
// to first chunk (an answer in one reply has none: its duration says it),
// the final reply ends the request and its header's usage counts its
// tokens. It returns the delivery's mark from now on: with markHeaders
// after a headers reply.
func (r *requestMetrics) replied(rep *router.Reply[peer], code string, fr []byte, format frameFormat, at time.Time) uint32 {
	s := r.series(rep.Mark)
	if s == nil {
		return rep.Mark
	}
	if code != "" {
		if rep.End {
			s.ended[outcomeFailed].Inc()
		}
		return rep.Mark
	}
	since := at.Sub(rep.Start).Seconds()
	if !rep.End {
		switch {
		case rep.N == 0 && format == formatM2M && frame.IsHeadersReply(fr):
			return rep.Mark | markHeaders
		case rep.N == 0 || rep.N == 1 && rep.Mark&markHeaders != 0:
			s.ttfc.Observe(since) // a stream's first chunk
		}
		return rep.Mark
	}
	s.duration.Observe(since)
	if format != formatM2M || len(fr) <= frame.OffSchema {
		s.ended[outcomeOK].Inc()
		return rep.Mark
	}
	switch frame.Schema(fr[frame.OffSchema]) {
	case frame.SchemaError:
		s.ended[outcomeError].Inc()
		return rep.Mark
	case frame.SchemaResponse, frame.SchemaEmbeddingResponse:
		var h frame.Header
		if frame.ReadHeader(fr, &h) == nil {
			s.tokensIn.Add(float64(h.PromptTokens))
			s.tokensOut.Add(float64(h.CompletionTokens))
		}
	}
	s.ended[outcomeOK].Inc()
	return rep.Mark
}

// abort is router.Abort for a delivery the daemon ends with an error: the
// request counts as failed.
func (srv *Server) abort(provider *router.Session[peer], deliveryID uint64) (router.Reply[peer], error) {
	rep, err := srv.router.Abort(provider, deliveryID)
	if err == nil {
		srv.reqm.ended(rep.Mark, outcomeFailed)
	}
	return rep, err
}

// requesterGone counts a final reply routed for a requester that has left.
func (srv *Server) requesterGone(rep *router.Reply[peer]) {
	if rep.End {
		srv.reqm.ended(rep.Mark, outcomeCancelled)
	}
}
