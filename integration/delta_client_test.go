package integration

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/bench"
	"github.com/m2md/m2md/negotiate"
)

// Conversations through the client library (docs/protocol.md §4.3): the
// requester finds each turn's base and sends a delta, the daemon routes it
// to the provider that holds the base, the provider's handler gets the
// document byte for byte; and whatever loses a base - a provider that
// evicted it, left, or never had the feature - costs a transparent resend,
// never an error.

func loadConversations(t testing.TB) []bench.Conversation {
	t.Helper()
	convs, err := bench.LoadConversations("../testdata/corpus/conversations")
	if err != nil {
		t.Fatal(err)
	}
	return convs
}

// answering is a provider handler that answers each turn of convs with its
// response, and refuses a request that did not arrive byte for byte.
func answering(convs []bench.Conversation) client.Handler {
	want := make(map[string][]byte)
	for _, c := range convs {
		for k, turn := range c.Turns {
			want[string(turn)] = c.Responses[k]
		}
	}
	return client.HandlerFunc(func(ctx context.Context, req *client.Request, w client.ResponseWriter) {
		if resp, ok := want[string(req.Body)]; ok {
			_ = w.Respond(resp)
			return
		}
		_ = w.Error("mismatch", "the request did not arrive byte for byte")
	})
}

type convRig struct {
	t     *testing.T
	d     *testDaemon
	tr    string
	mode  frame.Security
	convs []bench.Conversation
}

func (r *convRig) dial(id string, o client.Options) *client.Client {
	o.AgentID, o.Security, o.TLSConfig = id, r.mode, r.d.clientTLS(r.t)
	return dialClient(r.t, r.d.url(r.tr), o)
}

// provider dials an agent serving the conversations' models with answering.
func (r *convRig) provider(id string, o client.Options) *client.Client {
	o.Models, o.Handler = bench.ConversationModels(r.convs), answering(r.convs)
	return r.dial(id, o)
}

// turn sends turn k of conversation c and checks the answer; it returns the
// provider that answered.
func (r *convRig) turn(req *client.Client, c bench.Conversation, k int) string {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := req.Do(ctx, c.Turns[k])
	if err != nil {
		r.t.Fatalf("%s turn %d: %v", c.Name, k+1, err)
	}
	if !bytes.Equal(resp.Body, c.Responses[k]) {
		r.t.Fatalf("%s turn %d: the response differs", c.Name, k+1)
	}
	return resp.From
}

// Affinity across providers, every security mode on both transports: the
// whole conversation stays with the provider of its first turn, every later
// turn travels as a delta, nothing is resent, and the answers travel as
// reply deltas (docs/protocol.md §4.3) that arrive byte for byte.
func TestConversationAffinity(t *testing.T) {
	d := startDaemon(t, nil)
	convs := loadConversations(t)
	for i, mt := range modesTransports() {
		mode, tr := mt.mode, mt.tr
		t.Run(mode.String()+"/"+tr, func(t *testing.T) {
			r := &convRig{t: t, d: d, tr: tr, mode: mode, convs: convs}
			sfx := fmt.Sprintf("-%s-%s", mode, tr)
			p1 := r.provider("cp1"+sfx, client.Options{})
			p2 := r.provider("cp2"+sfx, client.Options{})
			req := r.dial("creq"+sfx, client.Options{})
			c := convs[i%len(convs)]
			first := r.turn(req, c, 0)
			for k := 1; k < len(c.Turns); k++ {
				if from := r.turn(req, c, k); from != first {
					t.Fatalf("turn %d went to %s, turn 1 to %s", k+1, from, first)
				}
			}
			st := req.Stats()
			if st.DeltasSent != uint64(len(c.Turns)-1) || st.DeltaResends != 0 {
				t.Errorf("%d deltas sent, %d resent; want %d and 0", st.DeltasSent, st.DeltaResends, len(c.Turns)-1)
			}
			if got := p1.Stats().DeltasReceived + p2.Stats().DeltasReceived; got != st.DeltasSent {
				t.Errorf("providers rebuilt %d deltas, %d were sent", got, st.DeltasSent)
			}
			if st.WireBytesSent*10 > st.JSONBytesSent {
				t.Errorf("requests: %d wire bytes for %d JSON bytes", st.WireBytesSent, st.JSONBytesSent)
			}
			sent := waitReplyDeltas(t, st.ReplyDeltasReceived, p1, p2)
			if st.ReplyDeltasReceived != sent || sent < uint64(len(c.Turns)-1) || st.BadFrames != 0 {
				t.Errorf("%d reply deltas received (%d bad frames), %d sent; want at least %d", st.ReplyDeltasReceived, st.BadFrames, sent, len(c.Turns)-1)
			}
		})
	}
}

type modeTransport struct {
	mode frame.Security
	tr   string
}

// modesTransports is every security mode on every transport.
func modesTransports() []modeTransport {
	var mts []modeTransport
	for _, m := range modes {
		for _, tr := range transports {
			mts = append(mts, modeTransport{m, tr})
		}
	}
	return mts
}

// waitReplyDeltas returns the reply deltas the providers sent, once they
// count n (a provider counts one when its write returns, which can be after
// the requester had it) or after a second.
func waitReplyDeltas(t *testing.T, n uint64, providers ...*client.Client) uint64 {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for {
		var sent uint64
		for _, p := range providers {
			sent += p.Stats().ReplyDeltasSent
		}
		if sent >= n || time.Now().After(deadline) {
			return sent
		}
		time.Sleep(time.Millisecond)
	}
}

// A missing base never reaches the caller: the provider that holds the
// conversation leaves mid-way (the daemon answers base_missing), and the
// next turn is resent whole, once, to the other provider; a provider that
// keeps no bases answers base_missing itself; one without the feature
// never has a base. Every turn's answer arrives byte for byte.
func TestConversationMissingBase(t *testing.T) {
	convs := loadConversations(t)
	c := convs[0]
	half := len(c.Turns) / 2
	t.Run("provider leaves", func(t *testing.T) {
		r := &convRig{t: t, d: startDaemon(t, nil), tr: "quic", mode: frame.SecurityAEAD, convs: convs}
		provs := map[string]*client.Client{}
		for _, id := range []string{"leave-a", "leave-b"} {
			provs[id] = r.provider(id, client.Options{})
		}
		req := r.dial("leave-req", client.Options{})
		var first string
		for k := range half {
			first = r.turn(req, c, k)
		}
		provs[first].Close()
		for k := half; k < len(c.Turns); k++ {
			if from := r.turn(req, c, k); from == first {
				t.Fatalf("turn %d answered by %s, which left", k+1, from)
			}
		}
		if st := req.Stats(); st.DeltaResends != 1 {
			t.Errorf("%d resends, want 1", st.DeltaResends)
		}
	})
	t.Run("provider keeps no bases", func(t *testing.T) {
		r := &convRig{t: t, d: startDaemon(t, nil), tr: "ws", mode: frame.SecurityHMAC, convs: convs}
		prov := r.provider("forgetful", client.Options{ConversationBases: -1})
		req := r.dial("forgetful-req", client.Options{})
		for k := range c.Turns {
			r.turn(req, c, k)
		}
		st := req.Stats()
		if st.DeltaResends == 0 || st.DeltaResends != prov.Stats().BasesMissing {
			t.Errorf("%d resends, provider answered base_missing %d times; want equal and above 0", st.DeltaResends, prov.Stats().BasesMissing)
		}
	})
	t.Run("provider without delta", func(t *testing.T) {
		r := &convRig{t: t, d: startDaemon(t, nil), tr: "quic", mode: frame.SecurityNone, convs: convs}
		prov := r.provider("plain", client.Options{DisableFeatures: []negotiate.Feature{negotiate.FeatureDelta}})
		req := r.dial("plain-req", client.Options{})
		for k := range c.Turns {
			r.turn(req, c, k)
		}
		if n := prov.Stats().DeltasReceived; n != 0 {
			t.Errorf("a provider without delta rebuilt %d deltas", n)
		}
		if n := r.d.Metric(t, "m2md_delta_routes_total", "result=base_missing"); n != float64(req.Stats().DeltaResends) || n == 0 {
			t.Errorf("daemon answered base_missing %v times, the requester resent %d", n, req.Stats().DeltaResends)
		}
	})
}

// Budgets: a provider whose bases budget holds about one conversation
// evicts the other's base when two alternate (base_missing, resent), and a
// requester whose history holds less than a turn sends every turn whole;
// neither shows the caller anything but its answers.
func TestConversationBudgetEviction(t *testing.T) {
	convs := loadConversations(t)
	r := &convRig{t: t, d: startDaemon(t, nil), tr: "ws", mode: frame.SecurityAEAD, convs: convs}
	prov := r.provider("tight", client.Options{ConversationBases: 24 << 10})
	req := r.dial("tight-req", client.Options{})
	small := r.dial("small-req", client.Options{ConversationHistory: 1024})
	for k := range 8 {
		for _, c := range convs[:2] {
			r.turn(req, c, k)
		}
		r.turn(small, convs[2], k)
	}
	if prov.Stats().BasesMissing == 0 || req.Stats().DeltaResends != prov.Stats().BasesMissing {
		t.Errorf("provider answered base_missing %d times, requester resent %d; want equal and above 0", prov.Stats().BasesMissing, req.Stats().DeltaResends)
	}
	if st := small.Stats(); st.DeltasSent != 0 || st.DeltaResends != 0 {
		t.Errorf("a requester keeping 1 KiB sent %d deltas", st.DeltasSent)
	}
}
