package integration

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/internal/daemontest"
	"github.com/m2md/m2md/negotiate"
)

// modelHandler answers by what the request's last message says: "fail"
// with an error, "stream" with three chunks and a final one, "hold" not
// until it is cancelled, anything else with one answer whose usage counts
// 7 + 5 tokens; a headers reply first when the request asks for one.
var modelHandler = client.HandlerFunc(func(ctx context.Context, req *client.Request, w client.ResponseWriter) {
	body := string(req.Body)
	if hw, ok := w.(client.HeaderWriter); ok && req.WantsHeaders {
		_ = hw.Headers([]byte(`{"x-request-id":"req_1"}`))
	}
	switch {
	case strings.Contains(body, `"content":"fail"`):
		_ = w.Error(negotiate.CodeNoResponse, "the model is down")
	case strings.Contains(body, `"content":"stream"`):
		for range 3 {
			if w.Chunk([]byte(`{"id":"c","object":"chat.completion.chunk","model":"m-chat","choices":[{"index":0,"delta":{"content":"x"}}]}`)) != nil {
				return
			}
		}
		_ = w.Respond([]byte(`{"id":"c","object":"chat.completion.chunk","model":"m-chat","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`))
	case strings.Contains(body, `"content":"hold"`):
		<-ctx.Done()
	default:
		_ = w.Respond([]byte(`{"id":"r","object":"chat.completion","model":"m-chat","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":7,"completion_tokens":5,"total_tokens":12}}`))
	}
})

// chat is a chat request's body.
func chat(model, content string, stream bool) []byte {
	type message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	b, err := json.Marshal(struct {
		Model    string    `json:"model"`
		Stream   bool      `json:"stream"`
		Messages []message `json:"messages"`
	}{model, stream, []message{{"user", content}}})
	if err != nil {
		panic(err)
	}
	return b
}

// The per-model metrics count what the requester saw: a provider's series
// exist at zero once it connects; answers, errors, streams, cancels, a
// provider lost mid-request and requests for a model nobody serves land in
// their outcome, with durations, time to first chunk and the tokens of the
// answers' usage.
func TestModelMetrics(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, nil)
	dialClient(t, d.url("ws"), client.Options{AgentID: "mprov", Models: []string{"m-chat"}, Handler: modelHandler})
	req := dialClient(t, d.url("ws"), client.Options{AgentID: "mreq"})
	pair := []string{"model=m-chat", "provider=mprov"}
	with := func(kv ...string) []string { return append(append([]string{}, pair...), kv...) }

	text, err := daemontest.FetchMetrics(d.AdminAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	for _, series := range []string{
		`m2md_model_requests_total{model="m-chat",outcome="ok",provider="mprov"} 0`,
		`m2md_model_requests_total{model="m-chat",outcome="cancelled",provider="mprov"} 0`,
		`m2md_model_requests_total{model="m-chat",outcome="unrouted",provider=""} 0`,
		`m2md_model_tokens_total{model="m-chat",provider="mprov",type="output"} 0`,
		`m2md_model_request_duration_seconds_count{model="m-chat",provider="mprov"} 0`,
		`m2md_model_time_to_first_chunk_seconds_count{model="m-chat",provider="mprov"} 0`,
	} {
		if !strings.Contains(text, series+"\n") {
			t.Errorf("before any request, /metrics lacks %s", series)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 2 {
		if _, err := req.Do(ctx, chat("m-chat", "hello", false)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := req.Do(ctx, chat("m-chat", "fail", false)); err == nil {
		t.Fatal("the failing request succeeded")
	}
	// Two streams, the second with a headers reply (docs/protocol.md
	// §4.7) before its first chunk, which is no chunk of the answer; and
	// an answer in one reply after one.
	for _, opts := range [][]client.CallOption{nil, {client.ResponseHeaders()}} {
		st, err := req.Stream(ctx, chat("m-chat", "stream", true), opts...)
		if err != nil {
			t.Fatal(err)
		}
		for {
			if _, err := st.Recv(); err != nil {
				break
			}
		}
	}
	if _, err := req.Do(ctx, chat("m-chat", "hello", false), client.ResponseHeaders()); err != nil {
		t.Fatal(err)
	}
	if _, err := req.Do(ctx, chat("nobody-serves-this", "hello", false)); remoteCode(err) != negotiate.CodeNoRoute {
		t.Fatalf("request for an unserved model: %v, want no_route", err)
	}
	hold, stop := context.WithCancel(ctx)
	go func() { time.Sleep(200 * time.Millisecond); stop() }()
	if _, err := req.Do(hold, chat("m-chat", "hold", false)); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled request: %v", err)
	}

	// A provider lost mid-request, with no other to fail over to: the
	// daemon ends the request (agent_gone).
	held := make(chan struct{}, 1)
	lost := dialClient(t, d.url("ws"), client.Options{AgentID: "mlost", Models: []string{"m-lost"},
		Handler: client.HandlerFunc(func(ctx context.Context, _ *client.Request, _ client.ResponseWriter) {
			held <- struct{}{}
			<-ctx.Done()
		})})
	go func() { <-held; lost.Close() }()
	if _, err := req.Do(ctx, chat("m-lost", "hello", false)); remoteCode(err) != negotiate.CodeAgentGone {
		t.Fatalf("request whose provider left: %v, want agent_gone", err)
	}

	d.WaitMetric(t, 1, "m2md_model_requests_total", with("outcome=cancelled")...)
	d.WaitMetric(t, 5, "m2md_model_requests_total", with("outcome=ok")...)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"m2md_model_requests_total", with("outcome=ok"), 5},
		{"m2md_model_requests_total", with("outcome=error"), 1},
		{"m2md_model_requests_total", with("outcome=cancelled"), 1},
		{"m2md_model_requests_total", with("outcome=failed"), 0},
		{"m2md_model_requests_total", []string{"model=m-lost", "provider=mlost", "outcome=failed"}, 1},
		// A model no provider registered is not given a label of its own.
		{"m2md_model_requests_total", []string{"model=other", "provider=", "outcome=unrouted"}, 1},
		{"m2md_model_request_duration_seconds_count", pair, 6},
		{"m2md_model_time_to_first_chunk_seconds_count", pair, 2}, // the streams', once each
		{"m2md_model_tokens_total", with("type=input"), 21},
		{"m2md_model_tokens_total", with("type=output"), 15},
	} {
		if got := d.Metric(t, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

// A request that crosses a cluster is counted once, on the requester's
// node, under the provider on the other node; that node, which delivered
// it, counts nothing.
func TestModelMetricsCluster(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 2, nil, nil)
	dialClient(t, nodes[1].url("ws"), client.Options{AgentID: "xprov", Models: []string{"m-x"}, Handler: modelHandler})
	waitAgentAt(t, nodes[0], "", "xprov", nodes[1])
	req := dialClient(t, nodes[0].url("ws"), client.Options{AgentID: "xreq"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := req.Do(ctx, chat("m-x", "hello", false)); err != nil {
		t.Fatal(err)
	}
	pair := []string{"model=m-x", "provider=xprov"}
	nodes[0].WaitMetric(t, 1, "m2md_model_requests_total", append(pair, "outcome=ok")...)
	for i, want := range []float64{1, 0} {
		for _, name := range []string{"m2md_model_requests_total", "m2md_model_request_duration_seconds_count"} {
			// Summed over every model, provider and outcome.
			if got := nodes[i].Metric(t, name); got != want {
				t.Errorf("node %d: %s = %v, want %v", i, name, got, want)
			}
		}
	}
	if got := nodes[0].Metric(t, "m2md_model_requests_total", append(pair, "outcome=ok")...); got != 1 {
		t.Errorf("node 0: m2md_model_requests_total%v = %v, want 1", pair, got)
	}
	if got := nodes[0].Metric(t, "m2md_model_tokens_total", append(pair, "type=output")...); got != 5 {
		t.Errorf("tokens of the answer from the other node: %v, want 5", got)
	}
	// The status page of the requester's node names the other node and
	// the provider there.
	code, page := adminGet(t, nodes[0], "/")
	other := nodes[1].Cluster().Node
	for _, want := range []string{"This node is " + nodes[0].Cluster().Node, "<td>" + other + "</td><td class=\"n\">1</td>", "xprov (" + other + ", 0 outstanding)"} {
		if code != 200 || !strings.Contains(page, want) {
			t.Errorf("status page of node 0 (HTTP %d) lacks %q", code, want)
		}
	}
}
