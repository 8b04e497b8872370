package bench

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// PlotLoad draws the runs' latency percentiles and throughput over the
// measurement window into path (.svg or .png): one colour per run in both
// panels, p50 solid and p99 dashed.
func (r *LoadReport) PlotLoad(path string) error {
	runs := []*Result{&r.Result, r.Baseline, r.NATS, r.Echo}
	runs = slices.DeleteFunc(runs, func(x *Result) bool { return x == nil || len(x.Timeline) == 0 })
	c := r.Config
	title := fmt.Sprintf("%s, security %s, %s payload", c.Transport, c.Security, c.PayloadName)
	if c.Mode == "open" {
		title += fmt.Sprintf(", open loop at %s round trips/s", formatCount(c.Rate))
	} else {
		title += fmt.Sprintf(", %d requests in flight", c.Concurrency)
	}

	lat := newPanel("Latency, " + title)
	lat.X.Label.Text = "time (s)"
	lat.Y.Label.Text = "latency (log scale)"
	lat.Y.Scale = plot.LogScale{}
	lat.Y.Tick.Marker = logTicks{format: formatDuration}
	tp := newPanel("Throughput")
	tp.X.Label.Text = "time (s)"
	tp.Y.Label.Text = "round trips per second"
	tp.Y.Tick.Marker = linearTicks{n: 5, format: formatCount}
	tp.Y.Min = 0

	var tmax, latMin, latMax, tpMax float64
	latMin = math.Inf(1)
	percentiles := []struct {
		name   string
		v      func(Sample) float64
		dashes []vg.Length
	}{
		{"p50", func(s Sample) float64 { return s.P50US }, nil},
		{"p99", func(s Sample) float64 { return s.P99US }, []vg.Length{vg.Points(5), vg.Points(3)}},
	}
	for _, run := range runs {
		name := runLabel(run.Run)
		for _, pc := range percentiles {
			var pts plotter.XYs
			for _, s := range run.Timeline {
				if v := pc.v(s); v > 0 {
					pts = append(pts, plotter.XY{X: s.TimeS, Y: v})
					latMin, latMax = math.Min(latMin, v), math.Max(latMax, v)
				}
			}
			if len(pts) == 0 {
				continue
			}
			l, err := plotter.NewLine(pts)
			if err != nil {
				return err
			}
			l.Color = seriesColor(name)
			l.Width = vg.Points(1.4)
			l.Dashes = pc.dashes
			lat.Add(l)
			lat.addLegend(name+" "+pc.name, l)
		}
		var pts plotter.XYs
		for _, s := range run.Timeline {
			pts = append(pts, plotter.XY{X: s.TimeS, Y: s.RoundTripsPerSec})
			tmax, tpMax = math.Max(tmax, s.TimeS), math.Max(tpMax, s.RoundTripsPerSec)
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = seriesColor(name)
		l.Width = vg.Points(1.4)
		tp.Add(l)
		tp.addLegend(name, l)
	}
	if len(runs) == 0 || math.IsInf(latMin, 1) {
		return fmt.Errorf("bench: no timeline to plot")
	}
	// Whole decades of latency, round throughput, whole seconds.
	lat.Y.Min = math.Pow(10, math.Floor(math.Log10(latMin)))
	lat.Y.Max = math.Pow(10, math.Ceil(math.Log10(latMax)))
	step := roundStep(tpMax / 5)
	tp.Y.Max = math.Ceil(tpMax*1.05/step) * step
	for _, p := range []*panel{lat, tp} {
		p.X.Min, p.X.Max = 0, math.Ceil(tmax)
		p.X.Tick.Marker = linearTicks{n: int(math.Min(math.Ceil(tmax), 10)), format: trimFloat}
	}
	return writeChart(path, []*panel{lat, tp}, 24*vg.Centimeter, 18*vg.Centimeter)
}

// PlotCodec draws, per size class, each form's bytes on the wire and cl100k
// tokens as a percentage of the JSON's, into path (.svg or .png).
func (r *CodecReport) PlotCodec(path string) error {
	bytesPanel, err := r.barPanel("Bytes on the wire, % of the JSON (lower is better)", "bytes, % of JSON", func(s CodecSummary) (float64, bool) {
		return 100 * s.ByteRatio, true
	})
	if err != nil {
		return err
	}
	tokPanel, err := r.barPanel("cl100k tokens of the text forms, % of the JSON's (lower is better)", "tokens, % of JSON", func(s CodecSummary) (float64, bool) {
		if s.TokenRatio == nil {
			return 0, false
		}
		return 100 * *s.TokenRatio, true
	})
	if err != nil {
		return err
	}
	return writeChart(path, []*panel{bytesPanel, tokPanel}, 26*vg.Centimeter, 22*vg.Centimeter)
}

// codecClip is where codec bars are cut, labelled with their value: past
// it a form costs more than 3 times the JSON, and the scale would flatten
// the differences that matter.
const codecClip = 300

func (r *CodecReport) barPanel(title, ylabel string, value func(CodecSummary) (float64, bool)) (*panel, error) {
	p := newPanel(title)
	p.Y.Label.Text = ylabel
	p.X.Label.Text = "size class of the documents (all: the whole corpus)"
	var forms []string
	top := 0.0
	for _, f := range r.Forms {
		if f == formJSON {
			continue // the 100% line stands for it
		}
		for _, c := range r.Classes {
			if s, ok := r.summary(c, f); ok {
				if v, ok := value(s); ok {
					if !slices.Contains(forms, f) {
						forms = append(forms, f)
					}
					top = math.Max(top, v)
				}
			}
		}
	}
	ymax := math.Min(codecClip, math.Ceil(top/roundStep(top/6))*roundStep(top/6))
	p.Y.Min, p.Y.Max = 0, ymax
	if top > ymax {
		p.Y.Max = ymax * 1.16 // room for the labels of clipped bars
	}
	p.Y.Tick.Marker = clippedTicks{max: ymax, linearTicks: linearTicks{n: 6, format: func(v float64) string { return trimFloat(v) + "%" }}}
	// The reference line goes first so that bar labels are drawn over it.
	if err := referenceLine(p, 100, -0.5, float64(len(r.Classes))-0.5, "JSON (100%)"); err != nil {
		return nil, err
	}
	err := groupedBars(p, r.Classes, forms, func(f, c string) (float64, bool) {
		s, ok := r.summary(c, f)
		if !ok {
			return 0, false
		}
		return value(s)
	}, ymax, vg.Points(64), func(v float64) string { return fmt.Sprintf("%.0f%%", v) }, false)
	return p, err
}

// clippedTicks are linearTicks that stop at the clip value.
type clippedTicks struct {
	linearTicks
	max float64
}

func (t clippedTicks) Ticks(lo, hi float64) []plot.Tick {
	return t.linearTicks.Ticks(lo, math.Min(hi, t.max))
}

// ratioPanel is one panel of a ratio chart: for each group on the x axis
// (a transport and security mode, a cluster size), one bar per series (a
// payload), each the ratio of M2M's figure to a baseline's.
type ratioPanel struct {
	Title  string
	YLabel string // what the ratio is, e.g. "M2M / NATS, round trips per second"
	Groups []string
	Series []string
	// Value returns the ratio of (group, series); ok false leaves no bar.
	Value func(group, series string) (v float64, ok bool)
}

// plotRatios draws ratio panels one above the other into path (.svg or
// .png): every bar labelled with its value, a line at 1× (parity), one
// colour per series in every panel. Later comparisons (against NATS, across
// a cluster) publish their figures with it.
func plotRatios(path string, panels []ratioPanel) error {
	var ps []*panel
	for _, rp := range panels {
		p := newPanel(rp.Title)
		p.Y.Label.Text = rp.YLabel
		top := 1.0
		for _, g := range rp.Groups {
			for _, s := range rp.Series {
				if v, ok := rp.Value(g, s); ok {
					top = math.Max(top, v)
				}
			}
		}
		ymax := roundStep(top*1.1/4) * 4
		p.Y.Min, p.Y.Max = 0, ymax*1.12
		p.Y.Tick.Marker = clippedTicks{max: ymax, linearTicks: linearTicks{n: 4, format: func(v float64) string { return trimFloat(v) + "×" }}}
		if err := referenceLine(p, 1, -0.5, float64(len(rp.Groups))-0.5, "parity (1×)"); err != nil {
			return err
		}
		err := groupedBars(p, rp.Groups, rp.Series, func(s, g string) (float64, bool) { return rp.Value(g, s) },
			ymax, vg.Points(54), func(v float64) string { return fmt.Sprintf("%.2f×", v) }, true)
		if err != nil {
			return err
		}
		ps = append(ps, p)
	}
	if len(ps) == 0 {
		return fmt.Errorf("bench: no ratio to plot")
	}
	return writeChart(path, ps, 24*vg.Centimeter, vg.Length(len(ps))*8*vg.Centimeter)
}

// PlotLoadRatios draws, for load reports with a baseline (--baseline) or a
// comparison (--compare nats), M2M's throughput over each comparison's, per
// transport and security mode, one bar per payload: wall clock and per CPU
// second, into path (.svg or .png).
func PlotLoadRatios(path string, reps []*LoadReport) error {
	type comparison struct {
		name, short string // in titles, on the axis
		ratios      func(*LoadReport) *Ratios
	}
	var panels []ratioPanel
	for _, cmp := range []comparison{
		{"the bare relay", "relay", func(r *LoadReport) *Ratios { return r.Ratios }},
		{"NATS (over TLS on quic and wss)", "NATS", func(r *LoadReport) *Ratios { return r.NATSRatios }},
	} {
		var groups, payloads []string
		val := map[[2]string][2]float64{}
		for _, r := range reps {
			q := cmp.ratios(r)
			if q == nil {
				continue
			}
			g := r.Config.Transport + " " + r.Config.Security
			if !slices.Contains(groups, g) {
				groups = append(groups, g)
			}
			if !slices.Contains(payloads, r.Config.PayloadName) {
				payloads = append(payloads, r.Config.PayloadName)
			}
			perCPU := q.RoundTripsPerCPU
			if cmp.short == "relay" {
				perCPU = perCPURatio(r)
			}
			val[[2]string{g, r.Config.PayloadName}] = [2]float64{q.RoundTrips, perCPU}
		}
		if len(groups) == 0 {
			continue
		}
		slices.SortStableFunc(payloads, func(a, b string) int { return payloadOrder(a) - payloadOrder(b) })
		slices.SortStableFunc(groups, func(a, b string) int { return groupOrder(a) - groupOrder(b) })
		for i, what := range []string{"round trips per second", "round trips per CPU second"} {
			panels = append(panels, ratioPanel{
				Title:  fmt.Sprintf("M2M daemon / %s: %s (higher is better for M2M)", cmp.name, what),
				YLabel: "M2M / " + cmp.short,
				Groups: groups, Series: payloads,
				Value: func(g, s string) (float64, bool) {
					v, ok := val[[2]string{g, s}]
					return v[i], ok && v[i] > 0
				},
			})
		}
	}
	if len(panels) == 0 {
		return fmt.Errorf("bench: no report with a baseline or a comparison to plot")
	}
	return plotRatios(path, panels)
}

// payloadOrder sorts the built-in payloads by size, others after them.
func payloadOrder(name string) int {
	if i := slices.Index(BuiltinSizes(), name); i >= 0 {
		return i
	}
	return len(BuiltinSizes())
}

// groupOrder sorts "transport security" groups as the tables do: ws, wss,
// quic; none, hmac, aead.
func groupOrder(g string) int {
	tr, sec, _ := strings.Cut(g, " ")
	ti := slices.Index([]string{TransportWS, TransportWSS, TransportQUIC}, tr)
	si := slices.Index([]string{"none", "hmac", "aead"}, sec)
	if ti < 0 {
		ti = 3
	}
	if si < 0 {
		si = 3
	}
	return 4*ti + si
}

// perCPURatio is the report's round-trips-per-CPU ratio, computed from its
// repetitions for reports written before the field existed.
func perCPURatio(r *LoadReport) float64 {
	if r.Ratios != nil && r.Ratios.RoundTripsPerCPU != 0 {
		return r.Ratios.RoundTripsPerCPU
	}
	var vs []float64
	for _, rp := range r.Repetitions {
		if rp.Baseline != nil && rp.M2M.CPUPerRoundTrip > 0 {
			vs = append(vs, rp.Baseline.CPUPerRoundTrip/rp.M2M.CPUPerRoundTrip)
		}
	}
	return median(vs)
}
