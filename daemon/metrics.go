package daemon

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/m2md/m2md/internal/admin"
	"github.com/m2md/m2md/internal/router"
	"github.com/m2md/m2md/negotiate"
)

// Algorithm labels: the two frame kinds DATA can carry.
const (
	algoM2M         = "m2m"
	algoTokenNative = "tokennative"
)

// Label values. Every series of every value below exists from start, at
// zero, so an alert on a rate sees 0 and not "absent"; docs/operations.md
// lists them all (TestMetricsDocumented holds the two together). Reason
// labels are lower case, wire codes included (see reasonLabel).
var (
	transportLabels = []string{"quic", "ws", "inproc"}
	algorithmLabels = []string{algoM2M, algoTokenNative}

	handshakeFailureReasons = append(lower(
		negotiate.RejectVersionMismatch, negotiate.RejectNoCommonAlgorithm, negotiate.RejectSecurityPolicy,
		negotiate.RejectRateLimited, negotiate.RejectServerBusy, negotiate.RejectUnknown),
		"no_hello", reasonTooLarge, "shutdown", "protocol", "internal", "send_failed")
	closeReasons = append(lower(
		negotiate.ReasonNormal, negotiate.ReasonTimeout, negotiate.ReasonError,
		negotiate.ReasonClientShutdown, negotiate.ReasonServerShutdown, negotiate.ReasonReplaced),
		closeDisconnected)
	// routingFailureReasons: every reason of the router, and the daemon's own.
	routingFailureReasons = append(routerReasons(),
		string(negotiate.CodeQueueFull), string(negotiate.CodeTooLarge))
	refusalReasons = append(lower(
		negotiate.CodeBadTag, negotiate.CodeReplay, negotiate.CodeBadFrame, negotiate.CodeTooLarge,
		negotiate.CodeShutdown, negotiate.CodeRateLimited),
		"protocol", reasonMessageTimeout, "after_close")
	queueDropReasons = []string{
		string(negotiate.CodeQueueFull), "receiver_closing", "receiver_gone", "send_failed", "slow_consumer_closed",
		"error_dropped", dropErrorRateLimited, "control_full", "after_close", "too_many_channels", "protect_failed",
	}
	limitLabels       = []string{limitSessionsPerIP, limitNewSessionsPerIP, limitMessageRate, limitByteRate, limitControlRate, limitHandshakes, limitHandshakesPerIP}
	deltaRouteResults = []string{deltaAffinity, deltaSpread, deltaBaseMissing}
	cancelResults     = []string{"forwarded", "forwarded_remote", "remote_lost", "provider_without_cancel", "provider_queue_full", "not_outstanding"}
)

// Results of m2md_delta_routes_total: a request naming a base went to the
// base's provider, to another (spread), or got base_missing.
const (
	deltaAffinity    = "affinity"
	deltaSpread      = "spread"
	deltaBaseMissing = "base_missing"
)

// Refusal reasons of messages the transport would not deliver: above the
// read limit, or not whole within Config.MessageTimeout.
var (
	reasonTooLarge       = string(negotiate.CodeTooLarge)
	reasonMessageTimeout = "message_timeout"
)

// dropErrorRateLimited counts the rate_limited error replies not sent
// because the sender's error replies are over their own rate.
const dropErrorRateLimited = "error_rate_limited"

// closeDisconnected is the sessions_closed reason of a connection that went
// away without a CLOSE.
const closeDisconnected = "disconnected"

// reasonLabel is the label value of a wire code or reason: lower case, so
// REJECT codes and CLOSE reasons (upper case on the wire) read like the
// error codes beside them.
func reasonLabel[T ~string](code T) string { return strings.ToLower(string(code)) }

func lower[T ~string](codes ...T) []string {
	out := make([]string, len(codes))
	for i, c := range codes {
		out[i] = reasonLabel(c)
	}
	return out
}

func routerReasons() []string {
	var out []string
	for _, r := range router.Reasons() {
		out = append(out, string(r.Code()))
	}
	return out
}

// preset creates the series of every combination of values, at zero.
func preset(vec interface {
	WithLabelValues(...string) prometheus.Counter
}, values ...[]string) {
	var walk func(prefix []string, rest [][]string)
	walk = func(prefix []string, rest [][]string) {
		if len(rest) == 0 {
			vec.WithLabelValues(prefix...)
			return
		}
		for _, v := range rest[0] {
			walk(append(prefix[:len(prefix):len(prefix)], v), rest[1:])
		}
	}
	walk(nil, values)
}

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
	failovers         *prometheus.CounterVec
	// failoverNotKept counts requests not kept for failover because
	// Config.FailoverBytes was spent.
	failoverNotKept prometheus.Counter
	// deltaRoutes is resolved per result: the hot path adds to a Counter.
	deltaRoutes [3]prometheus.Counter // affinity, spread, base_missing
	// deltaReplies counts reply deltas delivered (docs/protocol.md §4.3).
	deltaReplies prometheus.Counter
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
			Name: "m2md_handshake_failures_total", Help: "Connections that did not become a session, by transport and reason (a REJECT code in lower case, no_hello, shutdown, protocol, internal, send_failed).",
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
			Name: "m2md_routing_failures_total", Help: "DATA frames accepted on receipt that could not be routed, by reason: the router's (no_route, provider_busy, agent_gone, ...) and the daemon's (queue_full, too_large). The sender got an error frame unless the reason says it is gone.",
		}, []string{"reason"}),
		framesRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "m2md_frames_refused_total", Help: "Messages refused on receipt, before routing (bad_tag, replay, bad_frame, too_large, shutdown, rate_limited, protocol, after_close), by reason.",
		}, []string{"reason"}),
		queueDrops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "m2md_queue_drops_total", Help: "Messages for a session not queued or not written (its send queue full, the session closing or gone, the write failed), by reason.",
		}, []string{"reason"}),
		routingSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "m2md_routing_seconds", Help: "Time from a DATA message read to its forward queued.",
			Buckets: prometheus.ExponentialBuckets(0.000001, 2, 20),
		}),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "m2md_limited_total", Help: "Connections refused or messages refused/dropped by a configured limit, by limit.",
		}, []string{"limit"}),
		cancels: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "m2md_cancels_total", Help: "CANCELs received from requesters, by result: forwarded to the provider, forwarded_remote (to the provider's cluster node), remote_lost (its node is gone), provider_without_cancel (its late replies are dropped), provider_queue_full, not_outstanding (the request had ended).",
		}, []string{"result"}),
		failovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "m2md_failovers_total", Help: "Requests delivered once more to another provider because theirs was lost before replying, by how it was lost: disconnected (its connection ended without CLOSE), closed (it closed, was replaced or closed by the daemon), unresponsive (it held requests and did not answer PING), node_gone (its cluster node reported it gone or is unreachable).",
		}, []string{"reason"}),
		failoverNotKept: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "m2md_failover_not_kept_total", Help: "Requests routed by model that were not kept for failover because the failover budget (daemon.Config.FailoverBytes) was spent: their provider's loss ends them with agent_gone.",
		}),
		sessionsClosed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "m2md_sessions_closed_total", Help: "Sessions ended, by CLOSE reason in lower case (disconnected: the connection went away without one).",
		}, []string{"reason"}),
	}
	for _, t := range transportLabels {
		m.sessions.WithLabelValues(t)
		m.sessionsTotal.WithLabelValues(t)
		m.handshakeSeconds.WithLabelValues(t)
	}
	preset(m.handshakeFailures, transportLabels, handshakeFailureReasons)
	for _, vec := range []*prometheus.CounterVec{m.framesIn, m.framesOut, m.bytesIn, m.bytesOut} {
		preset(vec, transportLabels, algorithmLabels)
	}
	preset(m.writeBatches, transportLabels)
	preset(m.routingFailures, routingFailureReasons)
	preset(m.framesRefused, refusalReasons)
	preset(m.queueDrops, queueDropReasons)
	preset(m.sessionsClosed, closeReasons)
	preset(m.limited, limitLabels)
	preset(m.cancels, cancelResults)
	preset(m.failovers, failoverReasons)
	deltaRoutes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "m2md_delta_routes_total", Help: "Requests naming a base document (feature delta), by result: affinity (went to the provider that received the base), spread (that provider was gone, or too loaded for a full request: the least loaded took it), base_missing (a delta whose base's provider is gone: the requester resends the full document).",
	}, []string{"result"})
	for i, r := range deltaRouteResults {
		m.deltaRoutes[i] = deltaRoutes.WithLabelValues(r)
	}
	m.deltaReplies = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "m2md_delta_replies_total", Help: "Final responses that providers sent as reply deltas (feature delta: compressed against the request they answer) and this node accepted for delivery.",
	})
	m.registry.MustRegister(
		admin.BuildInfo(),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.sessions, m.sessionsTotal, m.handshakeFailures, m.handshakeSeconds,
		m.framesIn, m.framesOut, m.writeBatches, m.bytesIn, m.bytesOut,
		m.routingFailures, m.framesRefused, m.queueDrops, m.routingSeconds, m.sessionsClosed, m.limited, m.cancels,
		m.failovers, m.failoverNotKept,
		deltaRoutes, m.deltaReplies,
	)
	return m
}

// sessionMetrics are the collectors one session touches per frame, resolved
// once so the hot path is an atomic add.
type sessionMetrics struct {
	framesIn, framesOut [numFormats]prometheus.Counter // indexed by frameFormat
	bytesIn, bytesOut   [numFormats]prometheus.Counter
	writeBatches        prometheus.Counter
}

func (m *metrics) forTransport(transport string) *sessionMetrics {
	s := &sessionMetrics{writeBatches: m.writeBatches.WithLabelValues(transport)}
	for i, algo := range algorithmLabels {
		s.framesIn[i] = m.framesIn.WithLabelValues(transport, algo)
		s.framesOut[i] = m.framesOut.WithLabelValues(transport, algo)
		s.bytesIn[i] = m.bytesIn.WithLabelValues(transport, algo)
		s.bytesOut[i] = m.bytesOut.WithLabelValues(transport, algo)
	}
	return s
}
