package bench

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// writeChart draws a column of plots into path, as SVG or PNG by its
// extension. SVGs reference the fonts by name instead of embedding them,
// which keeps them a few tens of kilobytes.
func writeChart(path string, plots []*plot.Plot, w, h vg.Length) error {
	rows := make([][]*plot.Plot, len(plots))
	for i, p := range plots {
		rows[i] = []*plot.Plot{p}
	}
	tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadTop: vg.Points(6), PadBottom: vg.Points(6), PadX: vg.Points(6), PadY: vg.Points(14)}
	var (
		canvas vg.CanvasWriterTo
		dc     draw.Canvas
	)
	switch strings.ToLower(filepath.Ext(path)) {
	case ".svg":
		c := vgsvg.NewWith(vgsvg.UseWH(w, h), vgsvg.EmbedFonts(false))
		canvas, dc = c, draw.New(c)
	case ".png":
		c := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(144), vgimg.UseBackgroundColor(color.White))
		canvas, dc = vgimg.PngCanvas{Canvas: c}, draw.New(c)
	default:
		return fmt.Errorf("bench: chart %s: the name must end in .svg or .png", path)
	}
	canvases := plot.Align(rows, tiles, dc)
	for i, p := range plots {
		p.Draw(canvases[i][0])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := canvas.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// PlotLoad draws the runs' latency percentiles and throughput over the
// measurement window into path (.svg or .png).
func (r *LoadReport) PlotLoad(path string) error {
	type series struct {
		name string
		res  *Result
	}
	runs := []series{{"M2M daemon", &r.Result}}
	if r.Baseline != nil {
		runs = append(runs, series{"bare relay", r.Baseline})
	}
	if r.Echo != nil {
		runs = append(runs, series{"echo target", r.Echo})
	}
	c := r.Config
	title := fmt.Sprintf("%s, security %s, %s payload", c.Transport, c.Security, c.PayloadName)
	if c.Mode == "open" {
		title += fmt.Sprintf(", open loop %s req/s", thousands(c.Rate))
	} else {
		title += fmt.Sprintf(", %d in flight", c.Concurrency)
	}

	lat := plot.New()
	lat.Title.Text = "Latency over time: " + title
	lat.X.Label.Text = "seconds"
	lat.Y.Label.Text = "latency (µs, log)"
	lat.Y.Scale = plot.LogScale{}
	lat.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	lat.Legend.Top = true
	lat.Legend.TextStyle.Font.Size = vg.Points(8)
	lat.Add(plotter.NewGrid())
	tp := plot.New()
	tp.Title.Text = "Throughput over time"
	tp.X.Label.Text = "seconds"
	tp.Y.Label.Text = "round trips / s"
	tp.Y.Min = 0
	tp.Legend.Top = true
	tp.Legend.TextStyle.Font.Size = vg.Points(8)
	tp.Add(plotter.NewGrid())

	percentiles := []struct {
		name string
		v    func(Sample) float64
	}{
		{"p50", func(s Sample) float64 { return s.P50US }},
		{"p99", func(s Sample) float64 { return s.P99US }},
	}
	for i, run := range runs {
		for j, pc := range percentiles {
			var pts plotter.XYs
			for _, s := range run.res.Timeline {
				if v := pc.v(s); v > 0 {
					pts = append(pts, plotter.XY{X: s.TimeS, Y: v})
				}
			}
			if len(pts) == 0 {
				continue
			}
			l, err := plotter.NewLine(pts)
			if err != nil {
				return err
			}
			l.Color = plotutil.Color(2*j + 1)
			l.Width = vg.Points(1.2)
			l.Dashes = plotutil.Dashes(i)
			lat.Add(l)
			lat.Legend.Add(run.name+" "+pc.name, l)
		}
		var pts plotter.XYs
		for _, s := range run.res.Timeline {
			pts = append(pts, plotter.XY{X: s.TimeS, Y: s.RoundTripsPerSec})
		}
		if len(pts) == 0 {
			continue
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.2)
		l.Dashes = plotutil.Dashes(i)
		tp.Add(l)
		tp.Legend.Add(run.name, l)
	}
	return writeChart(path, []*plot.Plot{lat, tp}, 20*vg.Centimeter, 18*vg.Centimeter)
}

// PlotCodec draws, per size class, each form's bytes on the wire and cl100k
// tokens as a percentage of the JSON's, into path (.svg or .png).
func (r *CodecReport) PlotCodec(path string) error {
	bytesPlot, err := r.barPlot("Bytes on the wire, % of JSON (lower is better)", func(s CodecSummary) (float64, bool) {
		return 100 * s.ByteRatio, true
	})
	if err != nil {
		return err
	}
	tokPlot, err := r.barPlot("cl100k tokens of the text forms, % of JSON's", func(s CodecSummary) (float64, bool) {
		if s.TokenRatio == nil {
			return 0, false
		}
		return 100 * *s.TokenRatio, true
	})
	if err != nil {
		return err
	}
	return writeChart(path, []*plot.Plot{bytesPlot, tokPlot}, 24*vg.Centimeter, 22*vg.Centimeter)
}

func (r *CodecReport) barPlot(title string, value func(CodecSummary) (float64, bool)) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = "%"
	p.Y.Min = 0
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	var forms []string
	for _, f := range r.Forms {
		for _, c := range r.Classes {
			if s, ok := r.summary(c, f); ok {
				if _, ok := value(s); ok {
					forms = append(forms, f)
					break
				}
			}
		}
	}
	barW := vg.Points(48 / float64(max(len(forms), 1)))
	for i, f := range forms {
		vals := make(plotter.Values, len(r.Classes))
		for j, c := range r.Classes {
			if s, ok := r.summary(c, f); ok {
				vals[j], _ = value(s)
			}
		}
		b, err := plotter.NewBarChart(vals, barW)
		if err != nil {
			return nil, err
		}
		b.Color = formColor(i)
		b.LineStyle.Width = 0
		b.Offset = barW * vg.Length(float64(i)-float64(len(forms)-1)/2)
		p.Add(b)
		p.Legend.Add(f, b)
	}
	p.NominalX(r.Classes...)
	return p, nil
}

// formColor gives up to a dozen distinguishable colours.
func formColor(i int) color.Color {
	palette := []color.RGBA{
		{0x44, 0x44, 0x44, 0xff}, {0x1f, 0x77, 0xb4, 0xff}, {0xff, 0x7f, 0x0e, 0xff}, {0x2c, 0xa0, 0x2c, 0xff},
		{0xd6, 0x27, 0x28, 0xff}, {0x94, 0x67, 0xbd, 0xff}, {0x8c, 0x56, 0x4b, 0xff}, {0xe3, 0x77, 0xc2, 0xff},
		{0x7f, 0x7f, 0x7f, 0xff}, {0xbc, 0xbd, 0x22, 0xff}, {0x17, 0xbe, 0xcf, 0xff},
	}
	return palette[i%len(palette)]
}

// PlotLoadRatios draws, for a set of load reports with baselines, the
// M2M/relay throughput ratio (wall clock and per CPU second) per transport
// and security mode, one bar per payload, into path (.svg or .png).
func PlotLoadRatios(path string, reps []*LoadReport) error {
	var groups, payloads []string
	val := map[[2]string][2]float64{}
	for _, r := range reps {
		if r.Ratios == nil {
			continue
		}
		g := r.Config.Transport + " " + r.Config.Security
		if !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
		if !slices.Contains(payloads, r.Config.PayloadName) {
			payloads = append(payloads, r.Config.PayloadName)
		}
		val[[2]string{g, r.Config.PayloadName}] = [2]float64{r.Ratios.RoundTrips, perCPURatio(r)}
	}
	if len(groups) == 0 {
		return fmt.Errorf("bench: no report with a baseline to plot")
	}
	panel := func(title string, idx int) (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text = title
		p.Y.Label.Text = "M2M / bare relay"
		p.Y.Min = 0
		p.Legend.Top = true
		p.Add(plotter.NewGrid())
		barW := vg.Points(36 / float64(len(payloads)))
		for i, pl := range payloads {
			vals := make(plotter.Values, len(groups))
			for j, g := range groups {
				vals[j] = val[[2]string{g, pl}][idx]
			}
			b, err := plotter.NewBarChart(vals, barW)
			if err != nil {
				return nil, err
			}
			b.Color = formColor(i + 1)
			b.LineStyle.Width = 0
			b.Offset = barW * vg.Length(float64(i)-float64(len(payloads)-1)/2)
			p.Add(b)
			p.Legend.Add(pl, b)
		}
		p.NominalX(groups...)
		return p, nil
	}
	wall, err := panel("Routed round trips, M2M daemon / bare relay (wall clock, median of repetitions)", 0)
	if err != nil {
		return err
	}
	cpu, err := panel("Round trips per CPU second, M2M daemon / bare relay", 1)
	if err != nil {
		return err
	}
	return writeChart(path, []*plot.Plot{wall, cpu}, 22*vg.Centimeter, 18*vg.Centimeter)
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
