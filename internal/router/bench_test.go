package router

import (
	"fmt"
	"testing"
)

// The benchmarks keep 32 requests in flight over 4 providers serving one
// model, the shape of a busy daemon session. Each op of the request
// benchmarks routes one request and ends the oldest one (request + END: the
// least every request costs); the chunk benchmark routes one stream chunk.

const (
	benchProviders = 4
	benchInFlight  = 32
)

type benchRig struct {
	r         *Router[int]
	requester *Session[int]
	providers []*Session[int]
	ring      [benchInFlight]Delivery[int]
	model     []byte
	peers     [][]byte
}

func newBenchRig(b *testing.B) *benchRig {
	rig := &benchRig{r: New[int](Config{}), model: []byte("gpt-4o")}
	var err error
	if rig.requester, _, err = rig.r.Register("", "requester", nil, 0); err != nil {
		b.Fatal(err)
	}
	for i := range benchProviders {
		id := fmt.Sprintf("provider-%d", i)
		p, _, err := rig.r.Register("", id, []string{"gpt-4o-mini", "gpt-4o"}, i+1)
		if err != nil {
			b.Fatal(err)
		}
		rig.providers = append(rig.providers, p)
		rig.peers = append(rig.peers, []byte(id))
	}
	return rig
}

func (rig *benchRig) fill(b *testing.B, req func(id uint64) Request) {
	for i := range benchInFlight {
		d, err := rig.r.RouteRequest(rig.requester, req(uint64(i+1)))
		if err != nil {
			b.Fatal(err)
		}
		rig.ring[i] = d
	}
}

func benchRequests(b *testing.B, req func(id uint64) Request) {
	rig := newBenchRig(b)
	rig.fill(b, req)
	b.ReportAllocs()
	id := uint64(benchInFlight)
	i := 0
	for b.Loop() {
		old := rig.ring[i]
		if _, err := rig.r.RouteReply(old.Provider, old.ID, true); err != nil {
			b.Fatal(err)
		}
		id++
		d, err := rig.r.RouteRequest(rig.requester, req(id))
		if err != nil {
			b.Fatal(err)
		}
		rig.ring[i] = d
		if i++; i == benchInFlight {
			i = 0
		}
	}
}

func BenchmarkRouteRequest(b *testing.B) {
	var rig *benchRig // only for the byte slices below
	rig = newBenchRig(b)
	model, peers := rig.model, rig.peers
	b.Run("by-model", func(b *testing.B) {
		benchRequests(b, func(id uint64) Request {
			return Request{ID: id, Channel: id & 7, Model: model, HasRoutingHeader: true}
		})
	})
	b.Run("addressed", func(b *testing.B) {
		benchRequests(b, func(id uint64) Request {
			return Request{ID: id, Channel: id & 7, Peer: peers[id%benchProviders]}
		})
	})
	// A conversation's turn preferring its provider (docs/protocol.md §4.3),
	// and a delta requiring it.
	names := make([]string, len(peers))
	for i, p := range peers {
		names[i] = string(p)
	}
	b.Run("prefer", func(b *testing.B) {
		benchRequests(b, func(id uint64) Request {
			return Request{ID: id, Channel: id & 7, Model: model, HasRoutingHeader: true, Prefer: names[id%benchProviders]}
		})
	})
	b.Run("require", func(b *testing.B) {
		benchRequests(b, func(id uint64) Request {
			return Request{ID: id, Channel: id & 7, Model: model, HasRoutingHeader: true, Prefer: names[id%benchProviders], Require: true}
		})
	})
}

func BenchmarkRouteReply(b *testing.B) {
	rig := newBenchRig(b)
	rig.fill(b, func(id uint64) Request {
		return Request{ID: id, Model: rig.model, HasRoutingHeader: true}
	})
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		d := rig.ring[i]
		if _, err := rig.r.RouteReply(d.Provider, d.ID, false); err != nil {
			b.Fatal(err)
		}
		if i++; i == benchInFlight {
			i = 0
		}
	}
}

// BenchmarkRouteParallel runs one requester per goroutine against the same
// 4 providers: the contention of many sessions routing at once.
func BenchmarkRouteParallel(b *testing.B) {
	rig := newBenchRig(b)
	var n int
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		rig.r.mu.Lock()
		n++
		name := fmt.Sprintf("parallel-%d", n)
		rig.r.mu.Unlock()
		requester, _, err := rig.r.Register("", name, nil, 0)
		if err != nil {
			b.Error(err)
			return
		}
		var ring [benchInFlight]Delivery[int]
		id := uint64(0)
		i := 0
		for pb.Next() {
			if old := ring[i]; old.ID != 0 {
				if _, err := rig.r.RouteReply(old.Provider, old.ID, true); err != nil {
					b.Error(err)
					return
				}
			}
			id++
			d, err := rig.r.RouteRequest(requester, Request{ID: id, Model: rig.model, HasRoutingHeader: true})
			if err != nil {
				b.Error(err)
				return
			}
			ring[i] = d
			if i++; i == benchInFlight {
				i = 0
			}
		}
	})
}

// BenchmarkPickScaling shows the least-loaded scan's cost as a model's
// provider count grows.
func BenchmarkPickScaling(b *testing.B) {
	for _, n := range []int{1, 4, 16, 64} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			r := New[int](Config{})
			requester, _, _ := r.Register("", "requester", nil, 0)
			for i := range n {
				if _, _, err := r.Register("", fmt.Sprintf("p%d", i), []string{"m"}, i); err != nil {
					b.Fatal(err)
				}
			}
			model := []byte("m")
			b.ReportAllocs()
			id := uint64(0)
			for b.Loop() {
				id++
				d, err := r.RouteRequest(requester, Request{ID: id, Model: model, HasRoutingHeader: true})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := r.RouteReply(d.Provider, d.ID, true); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
