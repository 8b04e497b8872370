package daemon

import (
	"net"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/m2md/m2md/cluster"
)

// registerClusterMetrics exports the cluster's counters on /metrics.
func (s *Server) registerClusterMetrics() {
	st := s.cluster.c.Stats()
	gauge := func(name, help string, f func() float64) {
		s.metrics.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
	}
	counter := func(name, help string, f func() float64) {
		s.metrics.registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f))
	}
	gauge("m2md_cluster_nodes", "Other cluster nodes this node hears heartbeats from.", func() float64 { return float64(st.Nodes.Load()) })
	gauge("m2md_cluster_remote_agents", "Agents registered on other nodes, as this node knows them.", func() float64 { return float64(st.RemoteAgents.Load()) })
	gauge("m2md_cluster_inbox_bytes", "Bytes of messages from other nodes waiting for this node's cluster dispatcher (bounded by --cluster-inbox-bytes).", func() float64 { return float64(st.InboxBytes.Load()) })
	counter("m2md_cluster_sent_total", "Requests and replies published to other nodes.", func() float64 { return float64(st.Sent.Load()) })
	counter("m2md_cluster_received_total", "Requests and replies received from other nodes.", func() float64 { return float64(st.Received.Load()) })
	dropped := map[string]*atomic.Uint64{"inbox_full": &st.Shed, "slow_consumer": &st.SlowConsumer}
	for _, r := range cluster.DropReasons() {
		dropped[r.String()] = &st.Dropped[r]
	}
	for reason, v := range dropped {
		s.metrics.registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "m2md_cluster_dropped_total", ConstLabels: prometheus.Labels{"reason": reason},
			Help: "Messages from other nodes not delivered, by reason: inbox_full (answered with an error), slow_consumer (dropped by NATS, reported to the sender, which answers them: m2md_cluster_lost_total), malformed, unknown_node (from a node not, or no longer, a member, or with no authenticated identity), bad_signature (a signature or seal that does not verify, or data not sealed), bad_certificate (a certificate that does not chain to --cluster-tls-ca or names another node), replayed (a counter already taken), stale (outside the control messages' time window, or an older incarnation), forbidden (a node speaking for another node, or for an agent of an org it cannot prove it has the secret of).",
		}, func() float64 { return float64(v.Load()) }))
	}
	for outcome, v := range map[string]*atomic.Uint64{"answered": &st.LostAnswered, "unnamed": &st.LostUnnamed} {
		s.metrics.registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "m2md_cluster_lost_total", ConstLabels: prometheus.Labels{"outcome": outcome},
			Help: "Requests and replies this node sent that another node reported lost (dropped by NATS, counted there as slow_consumer), by outcome: answered (the requester got queue_full, the provider its NOTICE) or unnamed (no longer remembered: every request between the two nodes was ended with queue_full).",
		}, func() float64 { return float64(v.Load()) }))
	}
	counter("m2md_cluster_send_failed_total", "Publishes that failed because the NATS connection was down (the sender got an error).", func() float64 { return float64(st.SendFailed.Load()) })
	for _, p := range cluster.Protections {
		s.metrics.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "m2md_cluster_links", ConstLabels: prometheus.Labels{"auth": p},
			Help: "This node's cluster links (routes to other nodes, and its own connection to NATS), by what protects them: mtls, tls+creds, tls, creds, password, token (its embedded server, on loopback) or none.",
		}, func() float64 { return float64(s.cluster.c.Links(p)) }))
	}
	counter("m2md_cluster_nodes_down_total", "Nodes declared dead (no heartbeat for the dead-after time) or that left.", func() float64 { return float64(st.NodesDown.Load()) })
}

// ClusterStatus is what an operator (or a test) sees of the cluster from
// this node.
type ClusterStatus struct {
	Node         string   // this node's id; empty without a cluster
	Nodes        int      // other nodes alive
	RemoteAgents int      // agents registered on other nodes
	RouteAddr    net.Addr // the embedded route listener (nil in external mode)
}

// Cluster returns the cluster's status; the zero value without a cluster.
func (s *Server) Cluster() ClusterStatus {
	if s.cluster == nil {
		return ClusterStatus{}
	}
	st := s.cluster.c.Stats()
	return ClusterStatus{
		Node:         s.cluster.c.Node(),
		Nodes:        int(st.Nodes.Load()),
		RemoteAgents: int(st.RemoteAgents.Load()),
		RouteAddr:    s.cluster.c.RouteAddr(),
	}
}
