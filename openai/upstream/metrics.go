package upstream

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/negotiate"
)

// MaxModelLabels caps the model label of the metrics: a server may list
// hundreds of models (a router such as OpenRouter does), and a request may
// name any. The first MaxModelLabels models given to Instrument keep their
// names; the rest, and every model a request names that is not among
// them, count as "other".
const MaxModelLabels = 64

// Outcomes of m2md_upstream_requests_total.
const (
	outcomeOK        = iota // a final reply was sent
	outcomeError            // an error reply was sent
	outcomeCancelled        // the delivery ended (CANCEL, session closed) before a final reply
	numOutcomes
)

var outcomeLabels = [numOutcomes]string{"ok", "error", "cancelled"}

// buckets span a model's answer: milliseconds to minutes.
var buckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// modelSeries are one model label's collectors, resolved once.
type modelSeries struct {
	duration, ttfc prometheus.Observer
	ended          [numOutcomes]prometheus.Counter
}

// Instrumented is a client.Handler that counts the requests of the
// handler it wraps, per model, in the Registerer given to Instrument.
type Instrumented struct {
	next     client.Handler
	byModel  map[string]*modelSeries // read-only after Instrument
	other    *modelSeries
	inFlight atomic.Int64
}

// Instrument wraps h so that its requests are counted in reg by model
// (models: the ones the agent serves, capped at MaxModelLabels). Every
// series of every model exists at zero from the start.
func Instrument(h client.Handler, reg prometheus.Registerer, models []string) (*Instrumented, error) {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "m2md_upstream_requests_total", Help: "Requests this agent forwarded to its server, by model and outcome: ok (a final reply was sent), error (an error reply: the server refused, failed, timed out or answered with something that is not an answer), cancelled (the requester cancelled or left first).",
	}, []string{"model", "outcome"})
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "m2md_upstream_request_duration_seconds", Help: "Time from a request's delivery to this agent to its final reply (ok or error) sent, by model.",
		Buckets: buckets,
	}, []string{"model"})
	ttfc := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "m2md_upstream_time_to_first_chunk_seconds", Help: "Time from a streamed request's delivery to this agent to its first chunk sent, by model.",
		Buckets: buckets,
	}, []string{"model"})
	in := &Instrumented{next: h, byModel: map[string]*modelSeries{}}
	inFlight := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "m2md_upstream_in_flight", Help: "Requests delivered to this agent and not yet answered.",
	}, func() float64 { return float64(in.inFlight.Load()) })
	for _, c := range []prometheus.Collector{requests, duration, ttfc, inFlight} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	series := func(model string) *modelSeries {
		s := &modelSeries{duration: duration.WithLabelValues(model), ttfc: ttfc.WithLabelValues(model)}
		for i, o := range outcomeLabels {
			s.ended[i] = requests.WithLabelValues(model, o)
		}
		return s
	}
	for _, m := range models {
		if len(in.byModel) == MaxModelLabels {
			break
		}
		if in.byModel[m] == nil {
			in.byModel[m] = series(m)
		}
	}
	in.other = in.byModel["other"]
	if in.other == nil {
		in.other = series("other")
	}
	return in, nil
}

// InFlight is the number of requests being answered now.
func (in *Instrumented) InFlight() int64 { return in.inFlight.Load() }

// ServeM2M counts the request and hands it to the wrapped handler.
func (in *Instrumented) ServeM2M(ctx context.Context, req *client.Request, w client.ResponseWriter) {
	s := in.byModel[req.Model]
	if s == nil {
		s = in.other
	}
	in.inFlight.Add(1)
	defer in.inFlight.Add(-1)
	cw := countingWriter{ResponseWriter: w, s: s, start: time.Now()}
	in.next.ServeM2M(ctx, req, &cw)
	cw.mu.Lock()
	defer cw.mu.Unlock()
	if !cw.ended {
		// No final reply: the delivery ended first, or the handler gave up
		// (the client then answers no_response, an error).
		if ctx.Err() != nil {
			s.ended[outcomeCancelled].Inc()
		} else {
			s.ended[outcomeError].Inc()
		}
		cw.ended = true
	}
}

// countingWriter observes the replies a handler sends.
type countingWriter struct {
	client.ResponseWriter
	s     *modelSeries
	start time.Time

	mu           sync.Mutex
	first, ended bool
}

// sent counts a reply that was written (err nil); final: it ended the
// request, with an error reply when failed.
func (w *countingWriter) sent(err error, final, failed bool) error {
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return nil
	}
	since := time.Since(w.start).Seconds()
	if !w.first && !final {
		w.s.ttfc.Observe(since) // a stream's first chunk
	}
	w.first = true
	if final {
		w.ended = true
		w.s.duration.Observe(since)
		if failed {
			w.s.ended[outcomeError].Inc()
		} else {
			w.s.ended[outcomeOK].Inc()
		}
	}
	return nil
}

// errNoHeaders: the wrapped ResponseWriter cannot send a headers reply.
var errNoHeaders = errors.New("upstream: the response writer sends no headers reply")

// Headers passes the headers reply on (client.HeaderWriter): it is no
// chunk of the answer, so it counts for nothing.
func (w *countingWriter) Headers(json []byte) error {
	if hw, ok := w.ResponseWriter.(client.HeaderWriter); ok {
		return hw.Headers(json)
	}
	return errNoHeaders
}

func (w *countingWriter) Chunk(json []byte) error {
	return w.sent(w.ResponseWriter.Chunk(json), false, false)
}

func (w *countingWriter) Chunks(jsons ...[]byte) error {
	return w.sent(w.ResponseWriter.Chunks(jsons...), false, false)
}

func (w *countingWriter) Respond(json []byte) error {
	return w.sent(w.ResponseWriter.Respond(json), true, false)
}

func (w *countingWriter) Error(code negotiate.ErrorCode, message string) error {
	return w.sent(w.ResponseWriter.Error(code, message), true, true)
}
