// Package admin is the admin HTTP endpoint that `m2md serve` and `m2md
// upstream` share: /metrics, /healthz and, when asked for, Go's profiles
// (net/http/pprof) under /debug/pprof/. Nothing it serves is secret, but
// the profiles cost CPU and show the program's internals, so they are off
// unless the operator turns them on.
package admin

import (
	"encoding/json"
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Options say what the mux serves beside /metrics.
type Options struct {
	// Health returns /healthz's HTTP status and JSON body.
	Health func() (int, any)
	// Pprof serves net/http/pprof under /debug/pprof/.
	Pprof bool
}

// Mux serves g's metrics on GET /metrics, opt.Health on GET /healthz and,
// with opt.Pprof, the profiles.
func Mux(g prometheus.Gatherer, opt Options) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		code, body := opt.Health()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(body)
	})
	if opt.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}
