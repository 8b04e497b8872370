// Package admin is the admin HTTP endpoint that `m2md serve` and `m2md
// upstream` share: /metrics, /healthz and, when asked for, Go's profiles
// (net/http/pprof) under /debug/pprof/. Nothing it serves is secret, but
// the profiles cost CPU and show the program's internals, so they are off
// unless the operator turns them on.
package admin

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/m2md/m2md/internal/buildinfo"
)

// BuildInfo is m2md_build_info: always 1, its labels say which build runs.
func BuildInfo() prometheus.Collector {
	bi := buildinfo.Get()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "m2md_build_info", Help: "Always 1; the labels say which build runs: module version, VCS commit, Go version.",
		ConstLabels: prometheus.Labels{"version": bi.Version, "commit": bi.Commit, "goversion": bi.GoVersion},
	})
	g.Set(1)
	return g
}

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

// Start serves h on the TCP address addr until stop is called, which shuts
// the server down (waiting up to a second for requests in progress).
func Start(addr string, h http.Handler) (bound net.Addr, stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = hs.Serve(ln) // ends with ErrServerClosed, or with the listener
	}()
	return ln.Addr(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
		<-done
	}, nil
}
