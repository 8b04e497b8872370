package bench

import (
	"fmt"
	"hash/fnv"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// The charts' conventions, shared by every chart bench draws, so that a
// reader who has seen one reads the next at a glance:
//
//   - a series (a wire form, a run, a payload) has one colour everywhere,
//     from seriesColors, and no colour means two things (the M2M daemon
//     run shares the blue of the binary M2M frame it carries); related
//     series share a hue (M2M forms blue, TokenNative green and purple, the
//     general-purpose compressors warm, payloads grey from light to dark);
//   - the legend sits in its own column right of the data, never over it;
//   - axes carry units and round ticks (25%, 1 ms, 10k), log scales where
//     the range spans decades;
//   - a bar beyond the axis is clipped at its top and labelled with its
//     value; a reference line marks parity (100% of JSON, 1× the baseline).

// seriesColors are the fixed colours of the series bench charts show.
var seriesColors = map[string]color.RGBA{
	// codec forms
	formJSON:          {0x55, 0x55, 0x55, 0xff},
	formGzipBase64:    {0xa6, 0x61, 0x1a, 0xff},
	formBrotliBase64:  {0xe6, 0x6c, 0x00, 0xff},
	formZstd:          {0xd4, 0xa0, 0x17, 0xff},
	formM2MText:       {0x6b, 0xae, 0xd6, 0xff},
	formM2MBinary:     {0x08, 0x51, 0x9c, 0xff},
	formTNCl100kText:  {0x74, 0xc4, 0x76, 0xff},
	formTNCl100kBin:   {0x00, 0x6d, 0x2c, 0xff},
	formTNO200kText:   {0xbc, 0xa6, 0xe0, 0xff},
	formTNO200kBinary: {0x54, 0x27, 0x8f, 0xff},
	// load runs
	runLabel(RunM2M):   {0x08, 0x51, 0x9c, 0xff},
	runLabel(RunRelay): {0xd6, 0x27, 0x28, 0xff},
	runLabel(RunNATS):  {0x17, 0xbe, 0xcf, 0xff},
	runLabel(RunEcho):  {0xe3, 0x77, 0xc2, 0xff},
	// payloads: light to dark as they grow
	Size256B: {0xbd, 0xbd, 0xbd, 0xff},
	Size1KB:  {0x73, 0x73, 0x73, 0xff},
	Size16KB: {0x25, 0x25, 0x25, 0xff},
}

// extraColors serve series without a fixed colour, picked by name so the
// same name gets the same colour in every chart.
var extraColors = []color.RGBA{
	{0x94, 0x67, 0xbd, 0xff}, {0x8c, 0x56, 0x4b, 0xff}, {0xbc, 0xbd, 0x22, 0xff}, {0x1f, 0x77, 0xb4, 0xff},
	{0xff, 0x98, 0x96, 0xff}, {0x98, 0xdf, 0x8a, 0xff}, {0xc4, 0x9c, 0x94, 0xff}, {0x9e, 0xda, 0xe5, 0xff},
}

func seriesColor(name string) color.Color {
	if c, ok := seriesColors[name]; ok {
		return c
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	return extraColors[h.Sum32()%uint32(len(extraColors))]
}

// runLabel is how charts and legends name a run.
func runLabel(run string) string {
	switch run {
	case RunM2M:
		return "M2M daemon"
	case RunRelay:
		return "bare relay"
	case RunNATS:
		return "NATS"
	case RunEcho:
		return "echo target"
	case RunSingle:
		return "M2M single-node"
	}
	return run
}

// panel is one plot of a chart and the legend drawn beside it.
type panel struct {
	*plot.Plot
	legend      plot.Legend
	legendWidth vg.Length // of its widest entry
	plotters    []plot.Plotter
}

// add adds plotters to the panel's plot, remembering them.
func (p *panel) add(ps ...plot.Plotter) {
	p.plotters = append(p.plotters, ps...)
	p.Plot.Add(ps...)
}

// addLegend adds a legend entry and keeps the legend's width.
func (p *panel) addLegend(name string, thumbs ...plot.Thumbnailer) {
	p.legend.Add(name, thumbs...)
	w := p.legend.TextStyle.Width(name) + p.legend.ThumbnailWidth + p.legend.Padding
	p.legendWidth = max(p.legendWidth, w)
}

func newPanel(title string) *panel {
	p := &panel{Plot: plot.New(), legend: plot.NewLegend()}
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(11)
	p.Title.Padding = vg.Points(6)
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font.Size = vg.Points(9)
		a.Tick.Label.Font.Size = vg.Points(8)
	}
	p.legend.TextStyle.Font.Size = vg.Points(8)
	p.legend.Top, p.legend.Left = true, true
	p.Add(plotter.NewGrid())
	return p
}

// legendWidth is the width of the widest legend of panels.
func legendWidth(panels []*panel) vg.Length {
	var w vg.Length
	for _, p := range panels {
		w = max(w, p.legendWidth)
	}
	if w > 0 {
		w += vg.Points(16)
	}
	return w
}

// writeChart draws panels one above the other into path, as SVG or PNG by
// its extension, each with its legend in a column to its right. SVGs
// reference the fonts by name instead of embedding them, which keeps them a
// few tens of kilobytes; PNGs are drawn at 144 dpi.
func writeChart(path string, panels []*panel, w, h vg.Length) error {
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
	lw := legendWidth(panels)
	plotArea := draw.Crop(dc, 0, -lw, 0, 0)
	rows := make([][]*plot.Plot, len(panels))
	for i, p := range panels {
		rows[i] = []*plot.Plot{p.Plot}
	}
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadTop: vg.Points(8), PadBottom: vg.Points(6), PadX: vg.Points(8), PadY: vg.Points(18)}
	canvases := plot.Align(rows, tiles, plotArea)
	for i, p := range panels {
		p.Draw(canvases[i][0])
		// The legend's column, from the top of this panel's data area.
		c := canvases[i][0]
		top := c.Max.Y - p.Title.TextStyle.Rectangle(p.Title.Text).Size().Y - p.Title.Padding
		p.legend.Draw(draw.Canvas{Canvas: dc.Canvas, Rectangle: vg.Rectangle{
			Min: vg.Point{X: dc.Max.X - lw + vg.Points(6), Y: c.Min.Y},
			Max: vg.Point{X: dc.Max.X, Y: top},
		}})
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

// linearTicks marks multiples of a round step (1, 2, 2.5 or 5 × 10^n) giving
// about n ticks, labelled by format.
type linearTicks struct {
	n      int
	format func(float64) string
}

func (t linearTicks) Ticks(lo, hi float64) []plot.Tick {
	step := roundStep((hi - lo) / float64(max(t.n, 2)))
	var ticks []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9; v += step {
		ticks = append(ticks, plot.Tick{Value: v, Label: t.format(v)})
	}
	return ticks
}

// roundStep is the smallest of 1, 2, 2.5, 5 × 10^n at least raw.
func roundStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	pow := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*pow >= raw*(1-1e-9) {
			return m * pow
		}
	}
	return 10 * pow
}

// logTicks marks 1, 2 and 5 × 10^n, labelled by format.
type logTicks struct{ format func(float64) string }

func (t logTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if v >= lo*(1-1e-9) && v <= hi*(1+1e-9) {
				ticks = append(ticks, plot.Tick{Value: v, Label: t.format(v)})
			}
		}
	}
	return ticks
}

// formatDuration labels a latency in microseconds with its unit.
func formatDuration(us float64) string {
	switch {
	case us >= 1e6:
		return trimFloat(us/1e6) + " s"
	case us >= 1e3:
		return trimFloat(us/1e3) + " ms"
	}
	return trimFloat(us) + " µs"
}

// formatCount labels a count with k or M.
func formatCount(v float64) string {
	switch {
	case math.Abs(v) >= 1e6:
		return trimFloat(v/1e6) + "M"
	case math.Abs(v) >= 1e3:
		return trimFloat(v/1e3) + "k"
	}
	return trimFloat(v)
}

func trimFloat(v float64) string {
	s := fmt.Sprintf("%.2f", v)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

// referenceLine draws a dashed horizontal line at y across the x range.
func referenceLine(p *panel, y, xmin, xmax float64, label string) error {
	l, err := plotter.NewLine(plotter.XYs{{X: xmin, Y: y}, {X: xmax, Y: y}})
	if err != nil {
		return err
	}
	l.Color = color.Black
	l.Width = vg.Points(1)
	l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.add(l)
	p.addLegend(label, l)
	return nil
}

// groupedBars draws, per group on the x axis, one bar per series: value
// (series, group) (ok false: no bar). Bars above ymax are cut at ymax and
// labelled with their value (format). Every series gets a legend entry.
func groupedBars(p *panel, groups, series []string, value func(s, g string) (float64, bool), ymax float64, width vg.Length, format func(float64) string, labelAll bool) error {
	barW := width / vg.Length(max(len(series), 1))
	for i, s := range series {
		vals := make(plotter.Values, len(groups))
		var labels plotter.XYLabels
		for j, g := range groups {
			v, ok := value(s, g)
			if !ok {
				continue
			}
			shown := math.Min(v, ymax)
			vals[j] = shown
			if v > ymax || labelAll {
				labels.XYs = append(labels.XYs, plotter.XY{X: float64(j), Y: shown})
				labels.Labels = append(labels.Labels, format(v))
			}
		}
		b, err := plotter.NewBarChart(vals, barW*0.9)
		if err != nil {
			return err
		}
		b.Color = seriesColor(s)
		b.LineStyle.Width = 0
		b.Offset = barW * vg.Length(float64(i)-float64(len(series)-1)/2)
		p.add(b)
		p.addLegend(s, b)
		if len(labels.XYs) > 0 {
			l, err := plotter.NewLabels(labels)
			if err != nil {
				return err
			}
			for k := range l.TextStyle {
				st := &l.TextStyle[k]
				st.Font.Size = vg.Points(7)
				st.XAlign, st.YAlign = draw.XCenter, draw.YBottom
				if barW < st.Width(labels.Labels[k]) {
					// Too narrow to write across: upwards from the top.
					st.Rotation = math.Pi / 2
					st.XAlign, st.YAlign = draw.XLeft, draw.YCenter
				}
			}
			l.Offset = vg.Point{X: b.Offset, Y: vg.Points(2)}
			p.add(l)
		}
	}
	p.NominalX(groups...)
	p.X.Min, p.X.Max = -0.5, float64(len(groups))-0.5
	return nil
}
