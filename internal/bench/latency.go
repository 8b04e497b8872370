package bench

import (
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// maxLatency is the largest latency a histogram tracks exactly; larger
// values are recorded as maxLatency (they are timeouts in all but name).
const maxLatency = time.Minute

// newHistogram returns a histogram of nanosecond latencies from 1 ns to a
// minute with three significant digits: 0.1% error at every scale, which
// is what makes p99.9 trustworthy without keeping every sample.
func newHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, int64(maxLatency), 3)
}

func recordLatency(h *hdrhistogram.Histogram, d time.Duration) {
	if d < 1 {
		d = 1
	}
	if d > maxLatency {
		d = maxLatency
	}
	_ = h.RecordValue(int64(d)) // cannot fail: d is in range
}

// Latency summarises a latency histogram, in microseconds.
type Latency struct {
	Count  int64   `json:"count"`
	MeanUS float64 `json:"mean_us"`
	P50US  float64 `json:"p50_us"`
	P90US  float64 `json:"p90_us"`
	P99US  float64 `json:"p99_us"`
	P999US float64 `json:"p999_us"`
	MaxUS  float64 `json:"max_us"`
	// Over1msPct and Over4msPct are the shares of round trips (percent)
	// slower than 1 and 4 ms. Two runs with the same p99 can have tails of
	// different shapes: a few round trips held one scheduler tick (4 ms at
	// CONFIG_HZ=250), or many spread over a millisecond or two. Percentiles
	// alone do not tell them apart, and the mean, which sets a closed
	// loop's rate, depends on which.
	Over1msPct float64 `json:"over_1ms_pct"`
	Over4msPct float64 `json:"over_4ms_pct"`
}

func summarize(h *hdrhistogram.Histogram) Latency {
	if h.TotalCount() == 0 {
		return Latency{}
	}
	us := func(ns int64) float64 { return float64(ns) / 1e3 }
	l := Latency{
		Count:  h.TotalCount(),
		MeanUS: h.Mean() / 1e3,
		P50US:  us(h.ValueAtQuantile(50)),
		P90US:  us(h.ValueAtQuantile(90)),
		P99US:  us(h.ValueAtQuantile(99)),
		P999US: us(h.ValueAtQuantile(99.9)),
		MaxUS:  us(h.Max()),
	}
	over := sharesOver(h, time.Millisecond, 4*time.Millisecond)
	l.Over1msPct, l.Over4msPct = over[0], over[1]
	return l
}

// sharesOver gives, for each of ds, the percentage of h's values above it
// (to the histogram's precision), in one pass over the buckets.
func sharesOver(h *hdrhistogram.Histogram, ds ...time.Duration) []float64 {
	n := make([]int64, len(ds))
	for _, b := range h.Distribution() {
		for i, d := range ds {
			if b.From > int64(d) {
				n[i] += b.Count
			}
		}
	}
	out := make([]float64, len(ds))
	for i := range n {
		out[i] = 100 * float64(n[i]) / float64(h.TotalCount())
	}
	return out
}
