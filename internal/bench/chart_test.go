package bench

import (
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

func TestRoundTicks(t *testing.T) {
	for _, tc := range []struct {
		raw, want float64
	}{{0.3, 0.5}, {1, 1}, {1.2, 2}, {2.2, 2.5}, {3, 5}, {6380, 10000}, {26, 50}} {
		if got := roundStep(tc.raw); got != tc.want {
			t.Errorf("roundStep(%v) = %v, want %v", tc.raw, got, tc.want)
		}
	}
	var got []string
	for _, tk := range (linearTicks{n: 5, format: formatCount}).Ticks(0, 30000) {
		got = append(got, tk.Label)
	}
	if want := []string{"0", "10k", "20k", "30k"}; !slices.Equal(got, want) {
		t.Errorf("throughput ticks %v, want %v", got, want)
	}
	got = nil
	for _, tk := range (logTicks{format: formatDuration}).Ticks(100, 1e6) {
		got = append(got, tk.Label)
	}
	if want := []string{"100 µs", "200 µs", "500 µs", "1 ms", "2 ms", "5 ms", "10 ms", "20 ms", "50 ms", "100 ms", "200 ms", "500 ms", "1 s"}; !slices.Equal(got, want) {
		t.Errorf("latency ticks %v, want %v", got, want)
	}
}

// TestSeriesColorsDistinct: no two named series share a colour, so a colour
// means one thing in every chart.
func TestSeriesColorsDistinct(t *testing.T) {
	seen := map[[4]uint8]string{}
	for name, c := range seriesColors {
		k := [4]uint8{c.R, c.G, c.B, c.A}
		if other, ok := seen[k]; ok && runLabel(RunM2M) != name && runLabel(RunM2M) != other {
			// The M2M run shares the binary M2M frame's blue on purpose.
			if !(name == formM2MBinary || other == formM2MBinary) {
				t.Errorf("%s and %s share a colour", name, other)
			}
		}
		seen[k] = name
	}
	if seriesColor("cluster-3") != seriesColor("cluster-3") {
		t.Error("an unnamed series changes colour")
	}
}

// TestBarsBeyondRangeLabelled: a bar above the axis is cut at its top and
// labelled with its value; bars within it are not labelled.
func TestBarsBeyondRangeLabelled(t *testing.T) {
	p := newPanel("t")
	vals := map[string]float64{"a": 50, "b": 400}
	err := groupedBars(p, []string{"g"}, []string{"a", "b"}, func(s, _ string) (float64, bool) { return vals[s], true },
		150, vg.Points(40), func(v float64) string { return formatCount(v) + "%" }, false)
	if err != nil {
		t.Fatal(err)
	}
	var labels []string
	var tops []float64
	for _, pl := range p.plotters {
		switch x := pl.(type) {
		case *plotter.Labels:
			labels = append(labels, x.Labels...)
		case *plotter.BarChart:
			tops = append(tops, x.Values[0])
		}
	}
	if !slices.Equal(labels, []string{"400%"}) || !slices.Equal(tops, []float64{50, 150}) {
		t.Errorf("labels %v, bar tops %v", labels, tops)
	}
}

func TestPlotRatiosPNG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ratios.png")
	vals := map[[2]string]float64{{"ws none", Size1KB}: 0.93, {"quic aead", Size1KB}: 1.4, {"quic aead", Size16KB}: 0.5}
	err := plotRatios(path, []ratioPanel{{
		Title: "M2M / NATS", YLabel: "M2M / NATS", Groups: []string{"ws none", "quic aead"}, Series: []string{Size1KB, Size16KB},
		Value: func(g, s string) (float64, bool) { v, ok := vals[[2]string{g, s}]; return v, ok },
	}})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() < 1000 || b.Dy() < 400 {
		t.Errorf("chart is %v", b)
	}
}
