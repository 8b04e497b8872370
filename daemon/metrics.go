package daemon

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Algorithm labels: the two frame kinds DATA can carry.
const (
	algoM2M         = "m2m"
	algoTokenNative = "tokennative"
)

// metrics holds every Prometheus collector the daemon exports on /metrics.
// Hot paths never look labels up per frame: a session resolves its
// per-transport counters once (see sessionMetrics).
type metrics struct {
	registry *prometheus.Registry

	sessions          *prometheus.GaugeVec
	sessionsTotal     *prometheus.CounterVec
	handshakeFailures *prometheus.CounterVec
	handshakeSeconds  *prometheus.HistogramVec
	framesIn          *prometheus.CounterVec
	framesOut         *prometheus.CounterVec
	writeBatches      *prometheus.CounterVec
	bytesIn           *prometheus.CounterVec
	bytesOut          *prometheus.CounterVec
	routingFailures   *prometheus.CounterVec
	framesRefused     *prometheus.CounterVec
	queueDrops        *prometheus.CounterVec
	routingSeconds    prometheus.Histogram
	sessionsClosed    *prometheus.CounterVec
	limited           *prometheus.CounterVec
	cancels           *prometheus.CounterVec
}

func newMetrics() *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		sessions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "m2md_sessions", Help: "Established sessions now, by transport.",
		}, []string{"transport"}),
		sessionsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "m2md_sessions_total", Help: "Sessions established since start, by transport.",
		}, []string{"transport"}),
		handshakeFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "m2md_handshake_failures_total", Help: "Handshakes that did not end in ACCEPT, by reason (REJECT code, timeout, protocol).",
		}, []string{"transport", "reason"}),
		handshakeSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "m2md_handshake_seconds", Help: "Time from connection accepted to ACCEPT sent.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}, []string{"transport"}),
		framesIn: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "m2md_frames_in_total", Help: "DATA frames received from agents, by transport and algorithm.",
		}, []string{"transport", "algorithm"}),
		framesOut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "m2md_frames_out_total", Help: "DATA frames written to agents, by transport and algorithm.",
		}, []string{"transport", "algorithm"}),
		writeBatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "m2md_write_batches_total", Help: "Batches of messages the session writers handed their transport, by transport; on WebSocket each leaves in one write system call (up to 64 KiB). Frames out per batch is the coalescing.",
		}, []string{"transport"}),
		bytesIn: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "m2md_bytes_in_total", Help: "Bytes of DATA messages received, by transport and algorithm.",
		}, []string{"transport", "algorithm"}),
		bytesOut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "m2md_bytes_out_total", Help: "Bytes of DATA messages written, by transport and algorithm.",
		}, []string{"transport", "algorithm"}),
		routingFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "m2md_routing_failures_total", Help: "Frames that could not be routed, by reason; the sender got an error frame unless the reason says it is gone.",
		}, []string{"reason"}),
		framesRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "m2md_frames_refused_total", Help: "Frames refused on receipt (bad tag, wrong mode, replay, too large, malformed), by reason.",
		}, []string{"reason"}),
		queueDrops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "m2md_queue_drops_total", Help: "Messages not queued to a session because its send queue was full or it was closing, by reason.",
		}, []string{"reason"}),
		routingSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "m2md_routing_seconds", Help: "Time from a DATA message read to its forward queued.",
			Buckets: prometheus.ExponentialBuckets(0.000001, 2, 20),
		}),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "m2md_limited_total", Help: "Connections refused or messages refused/dropped by a configured limit, by limit.",
		}, []string{"limit"}),
		cancels: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "m2md_cancels_total", Help: "CANCELs received from requesters, by result: forwarded to the provider, provider_without_cancel (its late replies are dropped), provider_queue_full, not_outstanding (the request had ended).",
		}, []string{"result"}),
		sessionsClosed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "m2md_sessions_closed_total", Help: "Sessions ended, by CLOSE reason.",
		}, []string{"reason"}),
	}
	m.registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.sessions, m.sessionsTotal, m.handshakeFailures, m.handshakeSeconds,
		m.framesIn, m.framesOut, m.writeBatches, m.bytesIn, m.bytesOut,
		m.routingFailures, m.framesRefused, m.queueDrops, m.routingSeconds, m.sessionsClosed, m.limited, m.cancels,
	)
	return m
}

// sessionMetrics are the collectors one session touches per frame, resolved
// once so the hot path is an atomic add.
type sessionMetrics struct {
	framesIn, framesOut [2]prometheus.Counter // index: 0 m2m, 1 tokennative
	bytesIn, bytesOut   [2]prometheus.Counter
	writeBatches        prometheus.Counter
}

func (m *metrics) forTransport(transport string) *sessionMetrics {
	s := &sessionMetrics{writeBatches: m.writeBatches.WithLabelValues(transport)}
	for i, algo := range [2]string{algoM2M, algoTokenNative} {
		s.framesIn[i] = m.framesIn.WithLabelValues(transport, algo)
		s.framesOut[i] = m.framesOut.WithLabelValues(transport, algo)
		s.bytesIn[i] = m.bytesIn.WithLabelValues(transport, algo)
		s.bytesOut[i] = m.bytesOut.WithLabelValues(transport, algo)
	}
	return s
}
