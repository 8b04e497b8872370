// Package daemonhook carries what failure drills and tests do to a running
// daemon beyond its public API (crash it, ask whether a session is still
// served, where an agent is) from package daemon to its test harness
// (internal/daemontest), so that none of it is part of the daemon's API.
// Package daemon sets Of when it is initialised; it cannot export the hooks
// itself, and this package cannot import it (daemon imports this package).
package daemonhook

// Hooks are one daemon's test hooks.
type Hooks struct {
	// Crash stops the daemon the way a killed process stops: listeners
	// close, the cluster is left without a goodbye (the other nodes notice
	// by the missing heartbeats) and every connection is dropped without
	// CLOSE. Run then returns.
	Crash func()
	// SessionOpen reports whether the session with this id is still being
	// served: it turns false only after the session's teardown has removed
	// it from routing.
	SessionOpen func(sessionID string) bool
	// AgentNode reports where the daemon would route a request addressed to
	// agentID of org ("" without org secrets): "" for an agent connected to
	// it, the node id for one on another cluster node, and false if it
	// knows no such agent.
	AgentNode func(org, agentID string) (node string, ok bool)
}

// Of returns the hooks of srv, a *daemon.Server (set by package daemon).
var Of func(srv any) Hooks
