package daemon

import (
	"net/http"

	"github.com/m2md/m2md/internal/admin"
)

// adminHandler serves /healthz (liveness plus a few figures), /metrics,
// the status page at / and, with Config.Pprof, Go's profiles.
func (s *Server) adminHandler() http.Handler {
	mux := admin.Mux(s.metrics.registry, admin.Options{Pprof: s.cfg.Pprof, Health: func() (int, any) {
		status, code := "ok", http.StatusOK
		if s.draining.Load() {
			status, code = "draining", http.StatusServiceUnavailable
		}
		return code, map[string]any{"status": status, "sessions": s.sessionCount()}
	}})
	mux.Handle("GET /{$}", s.statusHandler())
	return mux
}
