package daemon

import (
	"cmp"
	_ "embed"
	"html/template"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/m2md/m2md/internal/buildinfo"
)

// The status page (GET / on the admin endpoint): what a person checks
// first, in plain HTML that reloads itself every statusRefresh, with no
// script and nothing from elsewhere. It shows names and counts only (agent
// ids, orgs, models, nodes), never a key, a secret or a payload, and
// html/template escapes every name, since agents choose them. Its tables
// are bounded, so a daemon with 10,000 sessions still serves a small page.
const (
	statusRefresh   = 5 * time.Second
	statusMaxAgents = 200
	statusMaxModels = 100
	statusMaxCells  = 50 // providers shown per model, models per agent
)

//go:embed status.html
var statusHTML string

var statusTemplate = template.Must(template.New("status").Parse(statusHTML))

type statusPage struct {
	Refresh                    int
	Node                       string
	Build                      buildinfo.Info
	Started, Uptime            string
	Draining                   bool
	Sessions                   int
	Transports                 []statusCount
	Rates                      []statusRate
	RateWindow                 string
	Agents                     []statusAgent
	MoreAgents                 int
	Models                     []statusModel
	MoreModels                 int
	Clustered                  bool
	Nodes                      []statusCount
	Outstanding, RemoteAgents  int
	ModelCap, ProviderCap, Cap int
}

type statusCount struct {
	Name string
	N    int
}

type statusRate struct {
	Name  string
	Value string
}

type statusAgent struct {
	ID, Org, Transport string
	Models             []string
	MoreModels         int
	Serving, Waiting   int
}

type statusProvider struct {
	Agent, Node string
	Outstanding int
}

type statusModel struct {
	Name          string
	Providers     []statusProvider
	MoreProviders int
}

// rateSampler turns the counters into rates between two page loads at
// least a second apart; loads closer together show the last rates again.
type rateSampler struct {
	mu     sync.Mutex
	at     time.Time
	totals map[string]float64
	rates  []statusRate
	window time.Duration
}

// rateSources are the counters the page shows as rates, summed over their
// labels, with the name a person reads.
var rateSources = []struct{ metric, name string }{
	{"m2md_model_requests_total", "requests ended / s"},
	{"m2md_frames_in_total", "frames in / s"},
	{"m2md_frames_out_total", "frames out / s"},
	{"m2md_bytes_in_total", "bytes in / s"},
	{"m2md_bytes_out_total", "bytes out / s"},
	{"m2md_routing_failures_total", "routing failures / s"},
	{"m2md_sessions_total", "new sessions / s"},
}

func (r *rateSampler) sample(fams []*dto.MetricFamily, now time.Time) ([]statusRate, time.Duration) {
	totals := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			totals[f.GetName()] += m.GetCounter().GetValue()
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if dt := now.Sub(r.at); r.totals != nil && dt >= time.Second {
		r.rates = r.rates[:0]
		for _, src := range rateSources {
			r.rates = append(r.rates, statusRate{src.name, formatRate((totals[src.metric] - r.totals[src.metric]) / dt.Seconds())})
		}
		r.window = dt
	}
	if r.totals == nil || now.Sub(r.at) >= time.Second {
		r.at, r.totals = now, totals
	}
	return slices.Clone(r.rates), r.window
}

func formatRate(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 1:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// statusHandler serves the page.
func (s *Server) statusHandler() http.HandlerFunc {
	var rates rateSampler
	return func(w http.ResponseWriter, r *http.Request) {
		page := s.statusPage(&rates, time.Now())
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		// Nothing on the page may load or run anything.
		w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
		if err := statusTemplate.Execute(w, page); err != nil {
			s.log.Debug().Err(err).Msg("status page not written whole")
		}
	}
}

func (s *Server) statusPage(rates *rateSampler, now time.Time) *statusPage {
	p := &statusPage{
		Refresh:  int(statusRefresh / time.Second),
		Build:    buildinfo.Get(),
		Started:  s.epoch.UTC().Format(time.RFC3339),
		Uptime:   now.Sub(s.epoch).Truncate(time.Second).String(),
		Draining: s.draining.Load(),
		ModelCap: maxModelLabels, ProviderCap: maxProviderLabels, Cap: maxPairLabels,
	}
	if fams, err := s.metrics.registry.Gather(); err == nil {
		var window time.Duration
		p.Rates, window = rates.sample(fams, now)
		p.RateWindow = window.Truncate(100 * time.Millisecond).String()
	}

	models := map[string]*statusModel{}
	addProvider := func(model string, prov statusProvider) {
		m := models[model]
		if m == nil {
			m = &statusModel{Name: model}
			models[model] = m
		}
		m.Providers = append(m.Providers, prov)
	}
	byTransport := map[string]int{}
	s.mu.Lock()
	for se := range s.sessions {
		if se.rs == nil {
			continue
		}
		byTransport[se.transport]++
		a := statusAgent{ID: se.agent, Org: se.neg.Org, Transport: se.transport, Serving: se.rs.Outstanding(), Waiting: se.rs.Requests()}
		for _, m := range se.rs.Models() {
			a.Models = append(a.Models, m)
			addProvider(m, statusProvider{Agent: se.agent, Node: "this node", Outstanding: a.Serving})
		}
		p.Agents = append(p.Agents, a)
	}
	s.mu.Unlock()
	p.Sessions = len(p.Agents)
	p.Outstanding = s.Outstanding()

	if cs := s.cluster; cs != nil {
		p.Clustered = true
		p.Node = cs.c.Node()
		perNode := map[string]int{}
		cs.mu.Lock()
		for _, proxy := range cs.proxies {
			if proxy.rs == nil || proxy.rs.Closed() {
				continue
			}
			perNode[proxy.node.name]++
			p.RemoteAgents++
			for _, m := range proxy.rs.Models() {
				addProvider(m, statusProvider{Agent: proxy.agent, Node: proxy.node.name, Outstanding: proxy.rs.Outstanding()})
			}
		}
		for name := range cs.nodes { // the nodes this one has heard from (NodeDown forgets them)
			if _, ok := perNode[name]; !ok {
				perNode[name] = 0
			}
		}
		cs.mu.Unlock()
		for name, n := range perNode {
			p.Nodes = append(p.Nodes, statusCount{name, n})
		}
		slices.SortFunc(p.Nodes, func(a, b statusCount) int { return cmp.Compare(a.Name, b.Name) })
	}

	for t, n := range byTransport {
		p.Transports = append(p.Transports, statusCount{t, n})
	}
	slices.SortFunc(p.Transports, func(a, b statusCount) int { return cmp.Compare(a.Name, b.Name) })
	slices.SortFunc(p.Agents, func(a, b statusAgent) int { return cmp.Or(cmp.Compare(a.ID, b.ID), cmp.Compare(a.Org, b.Org)) })
	if len(p.Agents) > statusMaxAgents {
		p.MoreAgents = len(p.Agents) - statusMaxAgents
		p.Agents = p.Agents[:statusMaxAgents]
	}
	for i := range p.Agents {
		a := &p.Agents[i]
		if len(a.Models) > statusMaxCells {
			a.MoreModels = len(a.Models) - statusMaxCells
			a.Models = a.Models[:statusMaxCells]
		}
	}
	for _, m := range models {
		slices.SortFunc(m.Providers, func(a, b statusProvider) int {
			return cmp.Or(cmp.Compare(b.Outstanding, a.Outstanding), cmp.Compare(a.Agent, b.Agent))
		})
		if len(m.Providers) > statusMaxCells {
			m.MoreProviders = len(m.Providers) - statusMaxCells
			m.Providers = m.Providers[:statusMaxCells]
		}
		p.Models = append(p.Models, *m)
	}
	slices.SortFunc(p.Models, func(a, b statusModel) int { return cmp.Compare(a.Name, b.Name) })
	if len(p.Models) > statusMaxModels {
		p.MoreModels = len(p.Models) - statusMaxModels
		p.Models = p.Models[:statusMaxModels]
	}
	return p
}
