package integration

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/openai/ingress"
)

// TestOpenAIAttachedEndpoint: the endpoint attached to its daemon in
// process, as m2md serve wires it (daemon.Server.Attach, client.DialConn),
// serves the official SDK; its session is counted under transport
// "inproc"; and in a daemon without org secrets no session from the
// network, not even one from the daemon's own host, can take its agent
// id: the claimant is refused with REJECT SECURITY_POLICY and the endpoint
// serves on, where an endpoint dialled over loopback was replaced and had
// to claim its id back.
func TestOpenAIAttachedEndpoint(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, nil)
	dialClient(t, d.url("quic"), client.Options{AgentID: "attach-prov", Models: []string{"gpt-4o"}, TLSConfig: d.clientTLS(t),
		Handler: client.HandlerFunc(func(ctx context.Context, r *client.Request, w client.ResponseWriter) {
			_ = w.Respond(corpus(t, "resp-chat-01.json"))
		})})
	_, base := serveIngressWith(t, d, "ws", frame.SecurityAEAD, nil, nil, func(c *ingress.Config) {
		c.Dial = func(ctx context.Context, id ingress.Identity) (*client.Client, error) {
			return client.DialConn(ctx, d.Attach, client.Options{AgentID: id.AgentID, Security: frame.SecurityAEAD, Reconnect: true})
		}
	})
	sdk := openai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("any"), option.WithMaxRetries(0))
	ask := func(what string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := sdk.Chat.Completions.New(ctx, chatParams("gpt-4o")); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	ask("attached endpoint")
	if n := metric(t, d, "m2md_sessions", "transport=inproc"); n != 1 {
		t.Fatalf("m2md_sessions{transport=inproc} = %v, want 1 (the endpoint's session)", n)
	}

	id := ingress.NodeIdentity(ingress.Identity{AgentID: ingress.OpenIdentity}, d.Cluster().Node).AgentID
	for _, tr := range transports {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, err := client.Dial(ctx, d.url(tr), client.Options{AgentID: id, TLSConfig: d.clientTLS(t)})
		cancel()
		var rej *negotiate.RejectError
		if !errors.As(err, &rej) || rej.Code != negotiate.RejectSecurityPolicy {
			if c != nil {
				c.Close()
			}
			t.Fatalf("%s: a claimant of the endpoint's agent id %s got %v, want REJECT %s", tr, id, err, negotiate.RejectSecurityPolicy)
		}
		ask("after a claimant over " + tr)
	}
}
