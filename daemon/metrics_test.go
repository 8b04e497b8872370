package daemon

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/m2md/m2md/internal/buildinfo"
)

// documentedMetric is one metric of docs/operations.md's table: its labels
// and, for a label other than transport and algorithm, the values listed.
type documentedMetric struct {
	labels []string
	values []string // of the one label other than transport/algorithm (reason, limit, result)
}

var (
	docRow      = regexp.MustCompile("^\\| (`m2md_[^|]*?) *\\| *([^|]*?) *\\| *(.*) \\|$")
	docBacktick = regexp.MustCompile("`([a-z0-9_]+)`")
)

// readDocumentedMetrics parses the metrics tables of docs/operations.md. In
// the meaning column of a metric with a reason, limit, result or outcome
// label (or type), every `word` in backquotes is a value of that label.
func readDocumentedMetrics(t *testing.T) map[string]documentedMetric {
	t.Helper()
	b, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]documentedMetric{}
	for line := range strings.SplitSeq(string(b), "\n") {
		m := docRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var d documentedMetric
		for l := range strings.SplitSeq(m[2], ",") {
			if l = strings.TrimSpace(l); l != "" {
				d.labels = append(d.labels, l)
			}
		}
		if slices.ContainsFunc(d.labels, func(l string) bool {
			return l == "reason" || l == "limit" || l == "result" || l == "outcome" || l == "type"
		}) {
			for _, v := range docBacktick.FindAllStringSubmatch(m[3], -1) {
				if !strings.HasPrefix(v[1], "m2md_") {
					d.values = append(d.values, v[1])
				}
			}
		}
		for _, name := range docBacktick.FindAllStringSubmatch(m[1], -1) {
			out[name[1]] = d
		}
	}
	if len(out) < 10 {
		t.Fatalf("found only %d metrics in docs/operations.md's table", len(out))
	}
	return out
}

// scrape starts a daemon and reads its /metrics before any connection.
func scrape(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	srv := runServer(t, Config{QUICAddr: "127.0.0.1:0", WSAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", CertDir: t.TempDir()})
	resp, err := http.Get("http://" + srv.AdminAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// TestMetricsDocumented scrapes a fresh daemon: every metric of
// docs/operations.md is there with a series at zero for every documented
// label value, every m2md_ metric and label value there is documented, and
// build_info says which build runs.
func TestMetricsDocumented(t *testing.T) {
	docs := readDocumentedMetrics(t)
	fams := scrape(t)
	known := map[string][]string{"transport": transportLabels, "algorithm": algorithmLabels}

	for name, d := range docs {
		if slices.Contains(d.labels, "model") {
			continue // no model is known at start: TestModelMetricsDocumented
		}
		fam, ok := fams[name]
		if !ok {
			t.Errorf("%s is documented but not exported", name)
			continue
		}
		if name == "m2md_build_info" {
			continue
		}
		// Every combination of documented values has a series.
		want := 1
		for _, l := range d.labels {
			if vals, ok := known[l]; ok {
				want *= len(vals)
			} else {
				want *= len(d.values)
			}
		}
		if len(fam.GetMetric()) != want {
			t.Errorf("%s: %d series at start, want %d (labels %v, values %v)", name, len(fam.GetMetric()), want, d.labels, d.values)
		}
		for _, m := range fam.GetMetric() {
			if v := metricValue(m); v != 0 {
				t.Errorf("%s%v = %v at start", name, m.GetLabel(), v)
			}
		}
	}
	for name, fam := range fams {
		if !strings.HasPrefix(name, "m2md_") {
			continue
		}
		d, ok := docs[name]
		if !ok {
			t.Errorf("%s is exported but not in docs/operations.md", name)
			continue
		}
		for _, m := range fam.GetMetric() {
			for _, lp := range m.GetLabel() {
				if !slices.Contains(d.labels, lp.GetName()) {
					t.Errorf("%s has undocumented label %s", name, lp.GetName())
				}
				vals, ok := known[lp.GetName()]
				if !ok {
					vals = d.values
				}
				if name != "m2md_build_info" && !slices.Contains(vals, lp.GetValue()) {
					t.Errorf("%s{%s=%q}: value not documented", name, lp.GetName(), lp.GetValue())
				}
				if lp.GetValue() != strings.ToLower(lp.GetValue()) && name != "m2md_build_info" {
					t.Errorf("%s{%s=%q}: not lower case", name, lp.GetName(), lp.GetValue())
				}
			}
		}
	}

	bi := fams["m2md_build_info"]
	if bi == nil || len(bi.GetMetric()) != 1 || bi.GetMetric()[0].GetGauge().GetValue() != 1 {
		t.Fatalf("m2md_build_info: %v", bi)
	}
	got := map[string]string{}
	for _, lp := range bi.GetMetric()[0].GetLabel() {
		got[lp.GetName()] = lp.GetValue()
	}
	in := buildinfo.Get()
	if got["version"] != in.Version || got["commit"] != in.Commit || got["goversion"] != in.GoVersion || in.GoVersion == "" {
		t.Errorf("m2md_build_info labels %v, want %+v", got, in)
	}
}

func metricValue(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return 0
}

// TestMetricLabelLiterals reads the daemon's sources: every label value
// written as a string literal at a WithLabelValues call is one of the values
// created at start (and so documented, by TestMetricsDocumented), and no
// wire code goes into a label without reasonLabel. A new reason added at a
// call site alone fails here.
func TestMetricLabelLiterals(t *testing.T) {
	known := map[string][]string{
		"handshakeFailures": handshakeFailureReasons, "routingFailures": routingFailureReasons,
		"framesRefused": refusalReasons, "queueDrops": queueDropReasons, "sessionsClosed": closeReasons,
		"limited": limitLabels, "cancels": cancelResults,
	}
	call := regexp.MustCompile(`metrics\.(\w+)\.WithLabelValues\(([^\n]*)\)\.`)
	literal := regexp.MustCompile(`"([^"]*)"`)
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range call.FindAllStringSubmatch(string(b), -1) {
			vals, ok := known[m[1]]
			if !ok {
				continue
			}
			if strings.Contains(m[2], "string(negotiate.Reject") || strings.Contains(m[2], "string(negotiate.Reason") {
				t.Errorf("%s: %s takes an upper-case wire code; use reasonLabel", f, m[0])
			}
			for _, lit := range literal.FindAllStringSubmatch(m[2], -1) {
				n++
				if !slices.Contains(vals, lit[1]) {
					t.Errorf("%s: %s: %q is not among the values created at start (metrics.go) and documented", f, m[1], lit[1])
				}
			}
		}
	}
	if n < 10 {
		t.Fatalf("found only %d label literals: the pattern no longer matches the call sites", n)
	}
}
