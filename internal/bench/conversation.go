package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/negotiate"
)

// Conversation replay (`m2md bench conversation`): multi-turn chat
// conversations sent turn by turn through a daemon by a requester agent,
// answered by provider agents, once with conversation deltas (feature
// delta, docs/protocol.md §4.3) and once without (the baseline), with
// every byte checked.
//
// A corpus is a folder of conversation folders, each holding its turns as
// turn-01.json, turn-02.json, …: the chat requests an LLM client sends,
// where turn K+1 repeats turn K's messages, the assistant's answer and one
// new message. The provider answers turn K with a chat.completion whose
// message is that answer, as it appears in turn K+1 (the last turn gets a
// canned one), so the requester can find each turn's base as it would with
// a real model. Both ends are client.Clients: what is measured is what the
// library does for any agent.

// Defaults of ConversationConfig.
const (
	DefaultTurnTimeout = 30 * time.Second
	// conversationProviders serve every model of the corpus: two, so that
	// affinity has a choice to make and a provider can leave.
	conversationProviders = 2
)

// ConversationConfig configures RunConversation. The zero value (with a
// Corpus) replays through a daemon in this process over QUIC, mode none.
type ConversationConfig struct {
	// Corpus is the folder of conversation folders.
	Corpus string
	// Target is a running daemon's URL (quic://, ws://, wss://); empty
	// starts one in this process.
	Target string
	// Transport is the in-process daemon's transport: quic, ws or wss.
	Transport string
	// TLS verifies the daemon at Target (quic://, wss://).
	TLS *tls.Config
	// Security is the agents' frame security mode.
	Security frame.Security
	// ProviderLeaves closes, in the middle of the first conversation, the
	// provider that answered its last turn: the next turn's base is gone
	// with it and must be resent whole, once, invisibly to the caller.
	ProviderLeaves bool
	// TurnTimeout bounds each turn. Default DefaultTurnTimeout.
	TurnTimeout time.Duration
	// CommandLine is recorded in the report.
	CommandLine string
}

// ConversationReport is what RunConversation measured: the run with deltas
// (its figures at the top level) and the same run without them.
type ConversationReport struct {
	CommandLine    string `json:"command,omitempty"`
	Target         string `json:"target"`
	Transport      string `json:"transport"`
	Security       string `json:"security"`
	ProviderLeaves bool   `json:"provider_leaves"`
	ConversationRun
	Baseline ConversationRun `json:"baseline"`
}

// ConversationBytes are the counts and ratios of some turns. Wire bytes are
// DATA messages as the agents hand them to the transport, which is what the
// daemon counts in m2md_bytes_in_total: requests are what the requester
// sent (resends included), responses what the providers sent.
type ConversationBytes struct {
	Turns   int `json:"turns"`
	Errors  int `json:"errors"`
	Resends int `json:"resends"`
	// ReplyDeltas are the final responses that travelled as reply deltas
	// (docs/protocol.md §4.3), as the requester counted them.
	ReplyDeltas        int     `json:"reply_deltas"`
	JSONBytesRequests  int64   `json:"json_bytes_requests"`
	WireBytesRequests  int64   `json:"wire_bytes_requests"`
	JSONBytesResponses int64   `json:"json_bytes_responses"`
	WireBytesResponses int64   `json:"wire_bytes_responses"`
	RatioRequests      float64 `json:"ratio_requests"`
	RatioResponses     float64 `json:"ratio_responses"`
	RatioTotal         float64 `json:"ratio_total"`
}

// add counts o's turns and bytes in b (not its ratios).
func (b *ConversationBytes) add(o *ConversationBytes) {
	b.Turns += o.Turns
	b.Errors += o.Errors
	b.Resends += o.Resends
	b.ReplyDeltas += o.ReplyDeltas
	b.JSONBytesRequests += o.JSONBytesRequests
	b.WireBytesRequests += o.WireBytesRequests
	b.JSONBytesResponses += o.JSONBytesResponses
	b.WireBytesResponses += o.WireBytesResponses
}

// ratios computes the ratios from the bytes.
func (b *ConversationBytes) ratios() {
	b.RatioRequests = ratioOf(b.JSONBytesRequests, b.WireBytesRequests)
	b.RatioResponses = ratioOf(b.JSONBytesResponses, b.WireBytesResponses)
	b.RatioTotal = ratioOf(b.JSONBytesRequests+b.JSONBytesResponses, b.WireBytesRequests+b.WireBytesResponses)
}

// ConversationRun is one replay of the corpus.
type ConversationRun struct {
	Deltas bool `json:"deltas"`
	ConversationBytes
	// CPUPerTurnMicros is this process's CPU time (daemon and agents, when
	// the daemon runs here) per turn.
	CPUPerTurnMicros float64              `json:"cpu_per_turn_us"`
	LatencyMillis    LatencySummary       `json:"latency_ms"`
	Conversations    []ConversationFigure `json:"conversations"`
	FirstError       string               `json:"first_error,omitempty"`
	// WarmUp is what the untimed warm-up turns before the run sent. They
	// are in none of the figures above, but the daemon counts them in
	// m2md_bytes_in_total: add them to reconcile the two.
	WarmUp WarmUpBytes `json:"warm_up"`
}

// WarmUpBytes are the wire bytes of a run's warm-up turns, counted as
// ConversationBytes counts a run's.
type WarmUpBytes struct {
	Turns              int   `json:"turns"`
	WireBytesRequests  int64 `json:"wire_bytes_requests"`
	WireBytesResponses int64 `json:"wire_bytes_responses"`
}

// ConversationFigure is one conversation's share of a run.
type ConversationFigure struct {
	Name string `json:"name"`
	ConversationBytes
	TurnLatencyMillis []float64 `json:"turn_latency_ms"`
	// TurnWireRequests is each turn's request wire bytes, in order.
	TurnWireRequests []int64 `json:"turn_wire_bytes_requests"`
}

// LatencySummary is a set of per-turn latencies.
type LatencySummary struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// Conversation is one folder of a conversation corpus, with the responses
// the providers give.
type Conversation struct {
	Name      string
	Turns     [][]byte // the requests, turn by turn
	Responses [][]byte // Responses[i] answers Turns[i]
}

// LoadConversations reads a corpus of conversation folders (docs above).
func LoadConversations(dir string) ([]Conversation, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: corpus %s: %v", ErrPayload, dir, err)
	}
	var out []Conversation
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		c := Conversation{Name: e.Name()}
		for k := 1; ; k++ {
			b, err := os.ReadFile(filepath.Join(dir, e.Name(), fmt.Sprintf("turn-%02d.json", k)))
			if errors.Is(err, os.ErrNotExist) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("%w: %v", ErrPayload, err)
			}
			c.Turns = append(c.Turns, b)
		}
		if len(c.Turns) == 0 {
			continue
		}
		for k := range c.Turns {
			resp, err := answer(c.Name, k, c.Turns)
			if err != nil {
				return nil, err
			}
			c.Responses = append(c.Responses, resp)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no conversation folders (turn-01.json, …) in %s", ErrPayload, dir)
	}
	return out, nil
}

// ConversationModels lists the models the conversations' turns name, each
// once: what their providers serve.
func ConversationModels(convs []Conversation) []string {
	var models []string
	for _, c := range convs {
		for _, t := range c.Turns {
			var m struct {
				Model string `json:"model"`
			}
			if json.Unmarshal(t, &m) == nil && m.Model != "" && !slices.Contains(models, m.Model) {
				models = append(models, m.Model)
			}
		}
	}
	return models
}

// answer is the chat.completion answering turns[k]: the assistant message
// turns[k+1] carries after turns[k]'s messages, byte for byte, or a canned
// one for the last turn.
func answer(conv string, k int, turns [][]byte) ([]byte, error) {
	var cur struct {
		Model    string            `json:"model"`
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(turns[k], &cur); err != nil || len(cur.Messages) == 0 {
		return nil, fmt.Errorf("%w: %s turn %d is not a chat request with messages", ErrPayload, conv, k+1)
	}
	msg := json.RawMessage(`{"role":"assistant","content":"Glad that helped. Anything else you would like to go through?"}`)
	if k+1 < len(turns) {
		var next struct {
			Messages []json.RawMessage `json:"messages"`
		}
		if err := json.Unmarshal(turns[k+1], &next); err != nil || len(next.Messages) <= len(cur.Messages) {
			return nil, fmt.Errorf("%w: %s turn %d does not continue turn %d", ErrPayload, conv, k+2, k+1)
		}
		msg = next.Messages[len(cur.Messages)]
	}
	model, _ := json.Marshal(cur.Model)
	return fmt.Appendf(nil, `{"id":"chatcmpl-bench-%s-%02d","object":"chat.completion","created":1732000000,"model":%s,"choices":[{"index":0,"message":%s,"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`,
		conv, k+1, model, msg, len(turns[k])/4, len(msg)/4, (len(turns[k])+len(msg))/4), nil
}

// RunConversation replays the corpus with deltas, then without.
func RunConversation(ctx context.Context, cfg ConversationConfig) (*ConversationReport, error) {
	if cfg.TurnTimeout <= 0 {
		cfg.TurnTimeout = DefaultTurnTimeout
	}
	if cfg.Transport == "" {
		cfg.Transport = TransportQUIC
	}
	convs, err := LoadConversations(cfg.Corpus)
	if err != nil {
		return nil, err
	}
	url, tlsConf := cfg.Target, cfg.TLS
	if url == "" {
		certDir, err := os.MkdirTemp("", "m2md-bench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(certDir)
		d, err := startDaemon(certDir, frame.SecurityNone)
		if err != nil {
			return nil, err
		}
		defer d.stop()
		ep, err := d.endpoint(cfg.Transport)
		if err != nil {
			return nil, err
		}
		url, tlsConf = ep.addr, ep.tls
		if cfg.Transport == TransportQUIC {
			url = "quic://" + ep.addr
		}
	}
	rep := &ConversationReport{
		CommandLine: cfg.CommandLine, Target: cfg.Target, Transport: cfg.Transport,
		Security: cfg.Security.String(), ProviderLeaves: cfg.ProviderLeaves,
	}
	if rep.Target == "" {
		rep.Target = "in-process"
	} else {
		rep.Transport = strings.SplitN(cfg.Target, ":", 2)[0]
	}
	for i, deltas := range []bool{true, false} {
		run, err := replay(ctx, &cfg, url, tlsConf, convs, deltas, i)
		if err != nil {
			return nil, err
		}
		if deltas {
			rep.ConversationRun = *run
		} else {
			rep.Baseline = *run
		}
	}
	return rep, nil
}

// replay runs the corpus once through the daemon at url.
func replay(ctx context.Context, cfg *ConversationConfig, url string, tlsConf *tls.Config, convs []Conversation, deltas bool, runIndex int) (*ConversationRun, error) {
	opts := func(id string) client.Options {
		o := client.Options{AgentID: fmt.Sprintf("bench-conv-%s-%d", id, runIndex), Security: cfg.Security, TLSConfig: tlsConf}
		if !deltas {
			o.DisableFeatures = []negotiate.Feature{negotiate.FeatureDelta}
		}
		return o
	}
	dialCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ag, err := dialConversationAgents(dialCtx, url, opts, convs)
	if err != nil {
		return nil, err
	}
	defer ag.close()
	if got := ag.req.Session().Params.Has(negotiate.FeatureDelta); got != deltas {
		return nil, fmt.Errorf("bench: the session negotiated delta: %v, want %v (is feature delta disabled on the daemon?)", got, deltas)
	}
	run := &ConversationRun{Deltas: deltas}
	p0 := ag.provSent()
	if run.WarmUp, err = warmUp(ctx, url, opts("warmup"), convs[0], cfg.TurnTimeout); err != nil {
		return nil, err
	}
	run.WarmUp.WireBytesResponses = ag.provSent() - p0

	var all []time.Duration
	left := false
	cpu0 := processCPU()
	for ci, c := range convs {
		fig := ConversationFigure{Name: c.Name}
		for k := range c.Turns {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			from, lat, err := ag.turn(ctx, cfg.TurnTimeout, c, k, &fig, run)
			all = append(all, lat)
			if cfg.ProviderLeaves && !left && ci == 0 && k+1 == len(c.Turns)/2 && err == nil {
				ag.leave(from)
				left = true
			}
		}
		fig.ratios()
		run.Conversations = append(run.Conversations, fig)
		run.add(&fig.ConversationBytes)
	}
	cpu := processCPU() - cpu0
	if wrong := ag.wrongBytes(); wrong > 0 && run.FirstError == "" {
		run.FirstError = fmt.Sprintf("%d requests did not arrive byte for byte", wrong)
	}
	run.ratios()
	if run.Turns > 0 {
		run.CPUPerTurnMicros = float64(cpu.Microseconds()) / float64(run.Turns)
	}
	run.LatencyMillis = summarizeTurns(all)
	return run, nil
}

// conversationAgents are one run's agents: the providers, which answer each
// turn with the response the corpus pairs with it, and the requester.
type conversationAgents struct {
	provs []*client.Client
	req   *client.Client

	mu    sync.Mutex
	wrong int // requests that did not arrive byte for byte
}

// dialConversationAgents connects the providers, then the requester, with
// the options opts gives each agent id.
func dialConversationAgents(ctx context.Context, url string, opts func(id string) client.Options, convs []Conversation) (*conversationAgents, error) {
	expected := make(map[string][]byte) // request → response
	for _, c := range convs {
		for k, t := range c.Turns {
			expected[string(t)] = c.Responses[k]
		}
	}
	ag := &conversationAgents{}
	handler := client.HandlerFunc(func(ctx context.Context, req *client.Request, w client.ResponseWriter) {
		resp, ok := expected[string(req.Body)]
		if !ok {
			// The document did not arrive byte for byte.
			ag.mu.Lock()
			ag.wrong++
			ag.mu.Unlock()
			_ = w.Error("bench_mismatch", "request did not arrive byte for byte")
			return
		}
		_ = w.Respond(resp)
	})
	models := ConversationModels(convs)
	for i := range conversationProviders {
		o := opts(fmt.Sprintf("provider-%c", 'a'+i))
		o.Models, o.Handler = models, handler
		p, err := client.Dial(ctx, url, o)
		if err != nil {
			ag.close()
			return nil, fmt.Errorf("bench: provider: %w", err)
		}
		ag.provs = append(ag.provs, p)
	}
	req, err := client.Dial(ctx, url, opts("requester"))
	if err != nil {
		ag.close()
		return nil, fmt.Errorf("bench: requester: %w", err)
	}
	ag.req = req
	return ag, nil
}

// close closes the requester, then the providers, last dialled first.
func (ag *conversationAgents) close() {
	if ag.req != nil {
		ag.req.Close()
	}
	for _, p := range slices.Backward(ag.provs) {
		p.Close()
	}
}

func (ag *conversationAgents) wrongBytes() int {
	ag.mu.Lock()
	defer ag.mu.Unlock()
	return ag.wrong
}

// provSent is the wire bytes the providers have sent: the responses.
func (ag *conversationAgents) provSent() int64 {
	var n int64
	for _, p := range ag.provs {
		n += int64(p.Stats().WireBytesSent)
	}
	return n
}

// turn sends turn k of c, checks the response byte for byte, and adds what
// it cost to fig (and its first error to run). It returns the agent that
// answered, the turn's latency and its error.
func (ag *conversationAgents) turn(ctx context.Context, timeout time.Duration, c Conversation, k int, fig *ConversationFigure, run *ConversationRun) (from string, lat time.Duration, err error) {
	turn := c.Turns[k]
	s0, p0 := ag.req.Stats(), ag.provSent()
	tctx, cancel := context.WithTimeout(ctx, timeout)
	start := time.Now()
	resp, err := ag.req.Do(tctx, turn)
	lat = time.Since(start)
	cancel()
	s1, p1 := ag.req.Stats(), ag.provSent()
	switch {
	case err != nil:
		fig.Errors++
		if run.FirstError == "" {
			run.FirstError = fmt.Sprintf("%s turn %d: %v", c.Name, k+1, err)
		}
	case !bytes.Equal(resp.Body, c.Responses[k]):
		fig.Errors++
		if run.FirstError == "" {
			run.FirstError = fmt.Sprintf("%s turn %d: the response did not arrive byte for byte", c.Name, k+1)
		}
	}
	if s1.FramesSent-s0.FramesSent > 1 {
		fig.Resends++
	}
	fig.ReplyDeltas += int(s1.ReplyDeltasReceived - s0.ReplyDeltasReceived)
	fig.Turns++
	fig.JSONBytesRequests += int64(len(turn))
	fig.JSONBytesResponses += int64(len(c.Responses[k]))
	w := int64(s1.WireBytesSent - s0.WireBytesSent)
	fig.WireBytesRequests += w
	fig.TurnWireRequests = append(fig.TurnWireRequests, w)
	fig.WireBytesResponses += p1 - p0
	fig.TurnLatencyMillis = append(fig.TurnLatencyMillis, millis(lat))
	if err == nil {
		from = resp.From
	}
	return from, lat, err
}

// leave closes the provider that answered as from: the one holding the
// conversation's bases.
func (ag *conversationAgents) leave(from string) {
	for _, p := range ag.provs {
		if p.Session().AgentID == from {
			p.Close()
		}
	}
}

// warmUpTurns is how many turns of the first conversation warmUp sends.
const warmUpTurns = 3

// warmUp sends the first turns of c, untimed, from a requester of its own,
// so that neither run's figures include the process's first use of its
// code paths and pools (the first zstd encoder and decoder, the first
// delta, the first TLS session): measured first, the delta run paid it
// alone, up to 95 ms on one turn. It returns the turns and the requests'
// wire bytes; the caller counts the responses at its providers.
func warmUp(ctx context.Context, url string, o client.Options, c Conversation, timeout time.Duration) (WarmUpBytes, error) {
	dialCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	w, err := client.Dial(dialCtx, url, o)
	if err != nil {
		return WarmUpBytes{}, fmt.Errorf("bench: warm-up requester: %w", err)
	}
	defer w.Close()
	var b WarmUpBytes
	for k := range min(warmUpTurns, len(c.Turns)) {
		tctx, cancel := context.WithTimeout(ctx, timeout)
		_, err := w.Do(tctx, c.Turns[k])
		cancel()
		if err != nil {
			return b, fmt.Errorf("bench: warm-up turn %d of %s: %w", k+1, c.Name, err)
		}
		b.Turns++
	}
	b.WireBytesRequests = int64(w.Stats().WireBytesSent)
	return b, nil
}

func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func ratioOf(json, wire int64) float64 {
	if wire == 0 {
		return 0
	}
	return float64(json) / float64(wire)
}

func summarizeTurns(ds []time.Duration) LatencySummary {
	if len(ds) == 0 {
		return LatencySummary{}
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	at := func(q float64) float64 { return millis(s[min(len(s)-1, int(q*float64(len(s))))]) }
	return LatencySummary{P50: at(0.5), P90: at(0.9), Max: millis(s[len(s)-1]), Mean: millis(sum / time.Duration(len(s)))}
}

// Check fails a run whose turns did not all complete byte for byte.
func (r *ConversationReport) Check() error {
	for _, run := range []*ConversationRun{&r.ConversationRun, &r.Baseline} {
		if run.Errors > 0 {
			return fmt.Errorf("bench: %d of %d turns failed (deltas %v); first: %s", run.Errors, run.Turns, run.Deltas, run.FirstError)
		}
		if run.FirstError != "" {
			return fmt.Errorf("bench: %s", run.FirstError)
		}
	}
	return nil
}

// WriteJSON writes every figure.
func (r *ConversationReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable prints the per-conversation and total figures of both runs.
func (r *ConversationReport) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "conversation\tturns\tdeltas\treq JSON B\treq wire B\treq ratio\tresp JSON B\tresp wire B\treply deltas\ttotal ratio\tresends\terrors\tp50 ms\tmax ms\t\n")
	for _, run := range []*ConversationRun{&r.ConversationRun, &r.Baseline} {
		for _, c := range run.Conversations {
			lat := turnLatency(c.TurnLatencyMillis)
			fmt.Fprintf(tw, "%s\t%d\t%v\t%d\t%d\t%.1fx\t%d\t%d\t%d\t%.1fx\t%d\t%d\t%.2f\t%.2f\t\n", c.Name, c.Turns, run.Deltas,
				c.JSONBytesRequests, c.WireBytesRequests, c.RatioRequests, c.JSONBytesResponses, c.WireBytesResponses, c.ReplyDeltas, c.RatioTotal,
				c.Resends, c.Errors, lat.P50, lat.Max)
		}
		fmt.Fprintf(tw, "total\t%d\t%v\t%d\t%d\t%.1fx\t%d\t%d\t%d\t%.1fx\t%d\t%d\t%.2f\t%.2f\t\n", run.Turns, run.Deltas,
			run.JSONBytesRequests, run.WireBytesRequests, run.RatioRequests, run.JSONBytesResponses, run.WireBytesResponses, run.ReplyDeltas, run.RatioTotal,
			run.Resends, run.Errors, run.LatencyMillis.P50, run.LatencyMillis.Max)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	d, b := &r.ConversationRun, &r.Baseline
	_, err := fmt.Fprintf(w, "\nwith deltas vs without: requests %.1fx vs %.1fx, requests+responses %.1fx vs %.1fx; CPU per turn %.0f µs vs %.0f µs (this process); mean turn latency %.2f ms vs %.2f ms\n",
		d.RatioRequests, b.RatioRequests, d.RatioTotal, b.RatioTotal, d.CPUPerTurnMicros, b.CPUPerTurnMicros, d.LatencyMillis.Mean, b.LatencyMillis.Mean)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "not in the table: each run first sends %d untimed warm-up turns, %d + %d wire bytes (requests + responses) with deltas, %d + %d without; the daemon's m2md_bytes_in_total counts them too (JSON: warm_up)\n",
		d.WarmUp.Turns, d.WarmUp.WireBytesRequests, d.WarmUp.WireBytesResponses, b.WarmUp.WireBytesRequests, b.WarmUp.WireBytesResponses)
	return err
}

func turnLatency(ms []float64) LatencySummary {
	ds := make([]time.Duration, len(ms))
	for i, m := range ms {
		ds[i] = time.Duration(m * float64(time.Millisecond))
	}
	return summarizeTurns(ds)
}
