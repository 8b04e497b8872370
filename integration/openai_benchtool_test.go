package integration

import (
	"context"
	"testing"
	"time"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/bench"
)

// TestBenchOpenAIEndpoint: `m2md bench openai`'s generator against the
// real endpoint (a daemon, its OpenAI ingress as serve wires it, m2md
// upstream in front of a test provider), compared with that provider
// called directly: every request answered in full, none failed, on both.
func TestBenchOpenAIEndpoint(t *testing.T) {
	e := startEdges(t, "ws", frame.SecurityAEAD, nil, nil)
	for _, stream := range []bool{false, true} {
		before := e.upstream.count()
		rep, err := bench.RunOpenAI(context.Background(), bench.OpenAIConfig{
			URL: e.base + "/v1", Compare: e.upstream.srv.URL + "/v1", Model: "gpt-4o", Stream: stream,
			Connections: 4, Duration: 600 * time.Millisecond, Warmup: 100 * time.Millisecond, Slice: 200 * time.Millisecond,
			Timeout: 10 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range []*bench.OpenAIResult{&rep.Target, rep.Compare} {
			if r.Requests == 0 || r.Errors != 0 || r.WarmupErrors != 0 {
				t.Errorf("stream %v, %s: %d requests, %d errors %v, %d warm-up errors %v",
					stream, r.URL, r.Requests, r.Errors, r.ErrorsByReason, r.WarmupErrors, r.WarmupErrorsByReason)
			}
			if stream && (r.FirstChunk == nil || r.FirstChunk.Count != r.Requests) {
				t.Errorf("stream, %s: first chunk %+v", r.URL, r.FirstChunk)
			}
		}
		// Both the mesh's requests and the direct ones reached the provider.
		if got, want := int64(e.upstream.count()-before), rep.Target.Requests+rep.Compare.Requests; got < want {
			t.Errorf("stream %v: the provider received %d requests, the report counts %d answered", stream, got, want)
		}
		if err := rep.Check(); err != nil {
			t.Error(err)
		}
	}
}
