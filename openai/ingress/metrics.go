package ingress

import (
	"errors"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// tokenUse is what an answer's usage counted.
type tokenUse struct {
	n     int
	known bool
	// chunks counts the chunks of a stream, whose usage may be unknown.
	chunks int
}

// metrics are the endpoint's counters per key name (never the key): a
// nil *metrics counts nothing.
type metrics struct {
	requests *prometheus.CounterVec // key, status
	used     *prometheus.CounterVec // key
	refusals *prometheus.CounterVec // key, limit
}

// limitLabels are the limit label's values, as OpenAI names the limits in
// its error type.
var limitLabels = []string{"requests", "tokens", "concurrent_requests"}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "m2md_openai_requests_total",
			Help: "Requests of the OpenAI endpoint by key name and HTTP status.",
		}, []string{"key", "status"}),
		used: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "m2md_openai_tokens_total",
			Help: "Tokens the answers' usage counted, by key name.",
		}, []string{"key"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "m2md_openai_limit_refusals_total",
			Help: "Requests refused 429 for a key's limit, by key name and limit (requests, tokens, concurrent_requests).",
		}, []string{"key", "limit"}),
	}
	// An endpoint started again beside the same daemon counts on in the
	// series already registered.
	for _, c := range []**prometheus.CounterVec{&m.requests, &m.used, &m.refusals} {
		if err := reg.Register(*c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, err
			}
			existing, ok := are.ExistingCollector.(*prometheus.CounterVec)
			if !ok {
				return nil, err
			}
			*c = existing
		}
	}
	return m, nil
}

// names makes every key name's series exist at zero, so a rate over them
// is defined before the first request.
func (m *metrics) names(names map[string]KeyLimits) {
	if m == nil {
		return
	}
	for name := range names {
		m.requests.WithLabelValues(name, "200")
		m.requests.WithLabelValues(name, "429")
		m.used.WithLabelValues(name)
		for _, l := range limitLabels {
			m.refusals.WithLabelValues(name, l)
		}
	}
}

func (m *metrics) request(name string, status int) {
	if m == nil {
		return
	}
	if status == 0 {
		status = 499 // the client left before an answer
	}
	m.requests.WithLabelValues(name, strconv.Itoa(status)).Inc()
}

func (m *metrics) tokens(name string, n int) {
	if m != nil {
		m.used.WithLabelValues(name).Add(float64(n))
	}
}

func (m *metrics) refused(name, limit string) {
	if m != nil {
		m.refusals.WithLabelValues(name, limit).Inc()
	}
}
