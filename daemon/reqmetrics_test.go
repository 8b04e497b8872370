package daemon

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/router"
)

// TestModelMetricsDocumented: the per-model metrics of a provider's models
// are docs/operations.md's, with the labels and values listed there, and
// every one of them exists at zero before the first request.
func TestModelMetricsDocumented(t *testing.T) {
	docs := readDocumentedMetrics(t)
	reg := prometheus.NewRegistry()
	r := newRequestMetrics(reg)
	r.mu.Lock()
	r.pairLocked("m", "p", true)
	r.mu.Unlock()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, fam := range fams {
		name := fam.GetName()
		seen[name] = true
		d, ok := docs[name]
		if !ok {
			t.Errorf("%s is exported but not in docs/operations.md", name)
			continue
		}
		want := 1 // a histogram, or tokens of one type
		if len(d.values) > 0 {
			want = len(d.values)
		}
		if len(fam.GetMetric()) != want {
			t.Errorf("%s: %d series for one pair, want %d (%v)", name, len(fam.GetMetric()), want, d.values)
		}
		for _, m := range fam.GetMetric() {
			if v := metricValue(m); v != 0 {
				t.Errorf("%s%v = %v at start", name, m.GetLabel(), v)
			}
			for _, lp := range m.GetLabel() {
				if !slices.Contains(d.labels, lp.GetName()) {
					t.Errorf("%s has undocumented label %s", name, lp.GetName())
				}
				if n := lp.GetName(); (n == "outcome" || n == "type") && !slices.Contains(d.values, lp.GetValue()) {
					t.Errorf("%s{%s=%q}: value not documented", name, n, lp.GetValue())
				}
			}
		}
	}
	for name, d := range docs {
		if slices.Contains(d.labels, "model") && !seen[name] {
			t.Errorf("%s is documented but not exported for a provider's model", name)
		}
	}
}

// Agents name models and providers: however many they name, the label
// values stay within the caps, the excess counted as "other".
func TestModelLabelsBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := newRequestMetrics(reg)
	r.mu.Lock()
	for i := range 3 * maxPairLabels {
		r.pairLocked(fmt.Sprintf("model-%d", i%(2*maxModelLabels)), fmt.Sprintf("agent-%d", i), true)
	}
	// A requester's model is never given a label of its own.
	m := r.pairLocked("from-a-requester", "agent-0", false)
	for k, v := range r.pairs {
		if v == m && k[0] != labelOther {
			t.Errorf("an addressed request's unregistered model counts under %q", k[0])
		}
	}
	r.mu.Unlock()
	for i := range 1000 {
		r.refused(fmt.Appendf(nil, "hostile-%d", i))
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, fam := range fams {
		models, providers, pairs := map[string]bool{}, map[string]bool{}, map[string]bool{}
		for _, m := range fam.GetMetric() {
			var model, provider string
			for _, lp := range m.GetLabel() {
				switch lp.GetName() {
				case "model":
					model = lp.GetValue()
				case "provider":
					provider = lp.GetValue()
				}
			}
			if provider == "" {
				continue // unrouted: by model alone
			}
			models[model], providers[provider], pairs[model+"\x00"+provider] = true, true, true
		}
		if len(models) > maxModelLabels+1 || len(providers) > maxProviderLabels+1 || len(pairs) > maxPairLabels+1 {
			t.Errorf("%s: %d models, %d providers, %d pairs; caps %d, %d, %d (+ other)", fam.GetName(), len(models), len(providers), len(pairs), maxModelLabels, maxProviderLabels, maxPairLabels)
		}
		if !pairs[labelOther+"\x00"+labelOther] {
			t.Errorf("%s: the pairs past the cap are not counted under other/other", fam.GetName())
		}
	}
	if n := len(r.unrouted); n > maxModelLabels+1 {
		t.Errorf("%d unrouted series, cap %d + other", n, maxModelLabels)
	}
	if _, ok := r.unrouted["hostile-1"]; ok {
		t.Error("a model no provider registered got an unrouted series of its own")
	}
}

// BenchmarkRequestMetrics is the router's work for one request answered
// with a stream chunk and a final response, without the per-model metrics
// (off) and with them (on: the Marker's look-up, the first reply's time to
// first chunk, the final reply's duration, outcome and tokens, its response
// header read once more). The two run in turn, so -count interleaves them:
//
//	go test ./daemon -run '^$' -bench RequestMetrics -count 6
func BenchmarkRequestMetrics(b *testing.B) {
	final, err := frame.AppendEncode(nil, []byte(`{"id":"r","object":"chat.completion","model":"m-b","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":7,"completion_tokens":5,"total_tokens":12}}`), frame.Limits{})
	if err != nil {
		b.Fatal(err)
	}
	model := []byte("m-b")
	for _, on := range []bool{false, true} {
		name := "off"
		if on {
			name = "on"
		}
		b.Run(name, func(b *testing.B) {
			rt := router.New[peer](router.Config{})
			r := newRequestMetrics(prometheus.NewRegistry())
			if on {
				rt.SetMarker(r.mark)
			}
			prov := &session{agent: "p"}
			if _, _, err := rt.Register("", "p", []string{"m-a", "m-b"}, prov); err != nil {
				b.Fatal(err)
			}
			rrs, _, err := rt.Register("", "q", nil, &session{agent: "q"})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			at := time.Now() // the read loop's clock, read with or without the metrics
			id := uint64(0)
			for b.Loop() {
				id++
				d, err := rt.RouteRequest(rrs, router.Request{ID: id, Channel: 4, Model: model, HasRoutingHeader: true})
				if err != nil {
					b.Fatal(err)
				}
				rep, _ := rt.RouteReply(d.Provider, d.ID, false)
				if on {
					_ = r.replied(&rep, "", final, formatM2M, at)
				}
				rep, _ = rt.RouteReply(d.Provider, d.ID, true)
				if on {
					_ = r.replied(&rep, "", final, formatM2M, at)
				}
			}
			b.StopTimer()
			if on && r.series(prov.marks.Load().marks[1]).duration == nil {
				b.Fatal("no series for m-b")
			}
		})
	}
}
