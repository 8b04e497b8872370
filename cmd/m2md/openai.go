package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/openai"
	"github.com/m2md/m2md/openai/ingress"
	"github.com/m2md/m2md/security"
)

// openAIEdge is the OpenAI ingress of `m2md serve`: an HTTP server whose
// handler holds mesh sessions to the daemon it runs beside.
type openAIEdge struct {
	in *ingress.Ingress
	ln net.Listener

	unwatch  context.CancelFunc // stops watchKeys
	watching sync.WaitGroup
}

// loadOpenAIKeys reads --openai-keys-file and checks it against the org
// secrets, before the daemon starts.
func loadOpenAIKeys(keysFile string, orgSecrets map[string]security.Secret) (*ingress.Keys, error) {
	if keysFile == "" {
		if len(orgSecrets) > 0 {
			return nil, usagef("--openai-keys-file is required with --org-secrets-file: each key names the agent and org it acts as (or disable the ingress with --openai-addr -)")
		}
		return nil, nil
	}
	f, err := os.Open(keysFile)
	if err != nil {
		return nil, fmt.Errorf("--openai-keys-file: %w", err)
	}
	defer f.Close()
	keys, err := ingress.ParseKeys(f, keysFile)
	if err != nil {
		return nil, fmt.Errorf("--openai-keys-file: %w", err)
	}
	for _, id := range keys.Identities() {
		if _, ok := orgSecrets[id.Org]; len(orgSecrets) > 0 && !ok {
			return nil, fmt.Errorf("--openai-keys-file: agent %s names org %q, which --org-secrets-file does not list", id.AgentID, id.Org)
		}
		if len(orgSecrets) == 0 && id.Org != "" {
			return nil, fmt.Errorf("--openai-keys-file: agent %s names org %q, but the daemon has no --org-secrets-file", id.AgentID, id.Org)
		}
	}
	return keys, nil
}

// startOpenAI opens the ingress's sessions to the running daemon srv and
// starts serving HTTP on addr under limits. history is each session's
// client.Options.ConversationHistory.
func startOpenAI(ctx context.Context, srv *daemon.Server, cfg daemon.Config, addr string, keys *ingress.Keys, limits ingress.Limits, history int, log zerolog.Logger) (*openAIEdge, error) {
	in, err := ingress.New(ctx, ingress.Config{
		Keys:       keys,
		Limits:     limits,
		Registerer: srv.Registerer(),
		Node:       srv.Cluster().Node,
		Models:     srv.Models,
		Logger:     log.With().Str("component", "openai").Logger(),
		// The daemon's: one process, one exporter.
		TracerProvider: cfg.TracerProvider,
		Dial: func(ctx context.Context, id ingress.Identity) (*client.Client, error) {
			// Attached in process: the requests of the endpoint's agents
			// never leave it, and no session from the network can take
			// their agent ids (daemon.Server.Attach).
			return client.DialConn(ctx, srv.Attach, client.Options{
				AgentID:   id.AgentID,
				Org:       id.Org,
				OrgSecret: cfg.OrgSecrets[id.Org],
				// The weakest mode the daemon allows: frames that never
				// leave the process gain nothing from a tag, and sealing
				// and opening them cost 75 µs of a request's 0.6 ms at
				// 100 req/s. The daemon protects them again in each
				// receiver's mode.
				Security:  cfg.MinSecurity,
				Reconnect: true,
				Logger:    log.With().Str("component", "openai").Logger(), // the client adds the agent
				// A requester only: it keeps what it sent, for deltas,
				// and serves nothing, so it keeps no bases.
				ConversationHistory: history,
				ConversationBases:   -1,
				CompressionQuality:  openai.CompressionQuality,
				CompressFrom:        openai.CompressFrom,
			})
		},
	})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		in.Close()
		return nil, fmt.Errorf("--openai-addr: %w", err)
	}
	e := &openAIEdge{in: in, ln: ln}
	go e.in.Serve(ln)
	ev := log.Info().Str("addr", ln.Addr().String())
	if keys.Len() == 0 {
		log.Warn().Str("addr", ln.Addr().String()).Msg("OpenAI ingress is open: no --openai-keys-file, so anyone who can reach this address uses the mesh as agent " + ingress.NodeIdentity(ingress.Identity{AgentID: ingress.OpenIdentity}, srv.Cluster().Node).AgentID)
	} else {
		ev = ev.Int("keys", keys.Len())
	}
	ev.Msg("OpenAI-compatible ingress listening (POST /v1/chat/completions, POST /v1/embeddings, GET /v1/models)")
	return e, nil
}

// Addr is where the ingress listens.
func (e *openAIEdge) Addr() net.Addr { return e.ln.Addr() }

// stop lets requests in flight finish (at most grace), then ends the
// ingress's sessions. A nil edge (the endpoint off) has nothing to stop.
func (e *openAIEdge) stop(grace time.Duration) {
	if e == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if e.unwatch != nil {
		e.unwatch()
		e.watching.Wait()
	}
	e.in.Shutdown(ctx)
	e.in.Close()
}

// conversationBudget turns a conversation budget flag (bytes, 0 keeping
// nothing) into client.Options' (0 meaning the default, negative nothing).
func conversationBudget(flag int) int {
	if flag <= 0 {
		return -1
	}
	return flag
}
