package router

import "testing"

// kept counts its drops.
type kept struct{ drops int }

func (k *kept) Drop() { k.drops++ }

// TestKeep: what the daemon keeps beside a delivery for failover is
// dropped exactly once however the delivery ends (its first reply, its
// END, Abort, Cancel, its requester's departure), and handed to the
// daemon with the orphan, not dropped, when the provider leaves before
// replying; an orphan with a reply carries nothing and counts the replies.
func TestKeep(t *testing.T) {
	for _, tc := range []struct {
		name string
		// end ends delivery d of provider p for requester q; orphan
		// reports what Remove(p) returned, if end removed p.
		end       func(t *testing.T, r *Router[string], q, p *Session[string], d Delivery[string]) []Orphan[string]
		wantDrops int
		// wantKept: the orphan carries the kept value.
		wantKept    bool
		wantReplies uint32
	}{
		{"first reply", func(t *testing.T, r *Router[string], _, p *Session[string], d Delivery[string]) []Orphan[string] {
			_ = mustReply(t, r, p, d.ID, false)
			return nil
		}, 1, false, 0},
		{"end", func(t *testing.T, r *Router[string], _, p *Session[string], d Delivery[string]) []Orphan[string] {
			_ = mustReply(t, r, p, d.ID, true)
			return nil
		}, 1, false, 0},
		{"abort", func(t *testing.T, r *Router[string], _, p *Session[string], d Delivery[string]) []Orphan[string] {
			if _, err := r.Abort(p, d.ID); err != nil {
				t.Fatal(err)
			}
			return nil
		}, 1, false, 0},
		{"cancel", func(t *testing.T, r *Router[string], q, _ *Session[string], _ Delivery[string]) []Orphan[string] {
			if _, err := r.Cancel(q, 1, 4); err != nil {
				t.Fatal(err)
			}
			return nil
		}, 1, false, 0},
		{"requester leaves, then provider", func(t *testing.T, r *Router[string], q, p *Session[string], _ Delivery[string]) []Orphan[string] {
			r.Remove(q)
			return r.Remove(p)
		}, 1, false, 0},
		{"provider lost before replying", func(t *testing.T, r *Router[string], _, p *Session[string], _ Delivery[string]) []Orphan[string] {
			return r.Remove(p)
		}, 0, true, 0},
		{"lost before a reply", func(t *testing.T, r *Router[string], _, p *Session[string], d Delivery[string]) []Orphan[string] {
			o, ok := r.Lose(p, d.ID)
			if !ok {
				t.Fatal("Lose refused a delivery without a reply")
			}
			if _, again := r.Lose(p, d.ID); again {
				t.Fatal("Lose took the same delivery twice")
			}
			if _, err := r.RouteReply(p, d.ID, true); err != ErrUnknownRequest {
				t.Fatalf("a reply to a lost delivery: %v, want ErrUnknownRequest", err)
			}
			return []Orphan[string]{o}
		}, 0, true, 0},
		{"lost after a reply", func(t *testing.T, r *Router[string], _, p *Session[string], d Delivery[string]) []Orphan[string] {
			_ = mustReply(t, r, p, d.ID, false)
			if _, ok := r.Lose(p, d.ID); ok {
				t.Fatal("Lose took a delivery that had a reply")
			}
			return nil
		}, 1, false, 0},
		{"provider lost after a reply", func(t *testing.T, r *Router[string], _, p *Session[string], d Delivery[string]) []Orphan[string] {
			_ = mustReply(t, r, p, d.ID, false)
			_ = mustReply(t, r, p, d.ID, false)
			return r.Remove(p)
		}, 1, false, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, s := setup(t, Config{}, agentSpec{"q", nil}, agentSpec{"p", []string{"m"}})
			q, p := s["q"], s["p"]
			d, err := r.RouteRequest(q, byModel(1, "m"))
			if err != nil {
				t.Fatal(err)
			}
			k := &kept{}
			if !r.Keep(p, d.ID, k) {
				t.Fatal("Keep refused a fresh delivery")
			}
			if r.Keep(p, d.ID, &kept{}) {
				t.Fatal("Keep took a second value for one delivery")
			}
			orphans := tc.end(t, r, q, p, d)
			if k.drops != tc.wantDrops {
				t.Fatalf("dropped %d times, want %d", k.drops, tc.wantDrops)
			}
			var got *Orphan[string]
			for i := range orphans {
				got = &orphans[i]
			}
			if tc.wantKept != (got != nil && got.Kept == k) {
				t.Fatalf("orphans %+v, want the kept value: %v", orphans, tc.wantKept)
			}
			if got != nil && got.Replies != tc.wantReplies {
				t.Fatalf("orphan counts %d replies, want %d", got.Replies, tc.wantReplies)
			}
			if r.Keep(p, d.ID, &kept{}) {
				t.Fatal("Keep took a value for a delivery that has ended or been answered")
			}
		})
	}
}
