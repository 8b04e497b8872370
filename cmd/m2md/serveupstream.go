package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/rs/zerolog"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/openai/upstream"
	"github.com/m2md/m2md/transport"
)

// upstreamPrefix begins the names of serve's flags for its upstream agent:
// m2md upstream's flags, so --base-url becomes --upstream-base-url.
const upstreamPrefix = "upstream-"

// servedUpstream is m2md serve's provider agent (--upstream-base-url): the
// upstream of m2md upstream, attached to the daemon in process like the
// OpenAI endpoint's agents, so that the requests routed to its models
// reach the server with no socket between the daemon and the agent.
type servedUpstream struct {
	up  *upstream.Upstream
	opt client.Options
	c   *client.Client // nil until attach
	log zerolog.Logger
}

// upstreamAgentID is the in-process upstream agent's id: one per node of
// a cluster, where agent ids are cluster-wide, and "upstream-local" on a
// daemon that is no cluster node.
func upstreamAgentID(node string) string {
	if node == "" {
		node = "local"
	}
	return upstreamPrefix + node
}

// upstreamConfig checks serve's upstream flags and returns the upstream's
// Config; on is false without --upstream-base-url (no upstream agent). An
// agent of a daemon with org secrets authenticates like any other, with
// the org --upstream-org names.
func (o *serveOptions) upstreamConfig() (cfg upstream.Config, on bool, err error) {
	org, secrets := o.upstreamOrg, o.cfg.OrgSecrets
	switch {
	case org != "" && len(secrets) == 0:
		return cfg, false, usagef("--upstream-org %s: the daemon has no --org-secrets-file, so its agents do not authenticate", org)
	case o.upstream.cfg.BaseURL == "":
		if org != "" {
			return cfg, false, usagef("--upstream-org is the org of the in-process upstream agent, which only --upstream-base-url starts")
		}
		return cfg, false, nil
	case len(secrets) > 0 && org == "":
		return cfg, false, usagef("--upstream-org is required with --org-secrets-file and --upstream-base-url: the in-process upstream agent authenticates with one of its orgs")
	case len(secrets) > 0 && secrets[org] == nil:
		return cfg, false, usagef("--upstream-org %s: --org-secrets-file does not list this org", org)
	}
	cfg, err = o.upstream.config()
	return cfg, err == nil, err
}

// newServedUpstream makes the upstream of cfg and its agent's options (its
// models from --upstream-models or the server's GET /models, asked with
// ctx). The agent is attached later, once the daemon is ready.
func (o *serveOptions) newServedUpstream(ctx context.Context, cfg upstream.Config, flags settings, logger zerolog.Logger) (*servedUpstream, error) {
	log := logger.With().Str("component", "upstream").Logger()
	// The daemon's: one process, one exporter.
	cfg.Logger, cfg.TracerProvider = log, o.cfg.TracerProvider
	up, err := o.upstream.upstream(cfg, flags)
	if err != nil {
		return nil, err
	}
	opt, err := o.upstream.agentOptions(ctx, up, cfg, client.Options{
		Org:       o.upstreamOrg,
		OrgSecret: o.cfg.OrgSecrets[o.upstreamOrg],
		Security:  o.cfg.MinSecurity, // attached in process: as the endpoint's (startOpenAI)
		Logger:    log,               // the client adds the agent
	}, flags)
	if err != nil {
		up.Close()
		return nil, err
	}
	return &servedUpstream{up: up, opt: opt, log: log}, nil
}

// attach counts the upstream's requests in srv's metrics and attaches its
// agent to srv, which is ready. over is closed once srv.Run has returned:
// an attachment still waiting then gives up.
func (s *servedUpstream) attach(ctx context.Context, srv *daemon.Server, over <-chan struct{}) error {
	counted, err := upstream.Instrument(s.up, srv.Registerer(), s.opt.Models)
	if err != nil {
		return fmt.Errorf("upstream agent metrics: %w", err)
	}
	s.opt.Handler = counted
	s.opt.AgentID = upstreamAgentID(srv.Cluster().Node)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-over:
			cancel()
		case <-ctx.Done():
		}
	}()
	c, err := client.DialConn(ctx, attachUntilClosed(srv), s.opt)
	if err != nil {
		return fmt.Errorf("upstream agent %s: attaching to the daemon: %w", s.opt.AgentID, err)
	}
	s.c = c
	s.log.Info().Str("agent", s.opt.AgentID).Str("upstream", s.up.URL()).Strs("models", s.opt.Models).Msg("upstream agent attached in process")
	return nil
}

// attachUntilClosed is srv.Attach for the upstream agent, whose session
// the daemon closes only at its shutdown: once the daemon no longer
// serves, an attempt to reconnect waits for its ctx (the agent's Close)
// instead of failing, and logging, again and again until serve gets to
// close the agent.
func attachUntilClosed(srv *daemon.Server) func(context.Context) (transport.Conn, error) {
	return func(ctx context.Context) (transport.Conn, error) {
		conn, err := srv.Attach(ctx)
		if errors.Is(err, daemon.ErrNotServing) {
			<-ctx.Done()
			return nil, fmt.Errorf("%w: %w", err, ctx.Err())
		}
		return conn, err
	}
}

// done is closed when the agent has ended for good (never while it is
// attached and reconnecting); nil, never closed, for no agent or one not
// attached.
func (s *servedUpstream) done() <-chan struct{} {
	if s == nil || s.c == nil {
		return nil
	}
	return s.c.Done()
}

// ended is why the agent ended, once done is closed.
func (s *servedUpstream) ended() error {
	return fmt.Errorf("upstream agent %s ended: %w", s.opt.AgentID, s.c.Err())
}

// stop closes the agent's client and the upstream's idle connections to
// the server. serve calls it once the daemon has let the requests routed
// to the agent finish and has closed its session.
func (s *servedUpstream) stop() {
	if s.c != nil {
		if err := s.c.Close(); err != nil {
			s.log.Debug().Err(err).Msg("upstream agent closed without the daemon's acknowledgement")
		}
	}
	s.up.Close()
}
