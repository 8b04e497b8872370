package ingress

import (
	"context"
	"errors"
	"net"
	"net/http"
)

// Serve answers HTTP on ln under Config.Limits: the idle and header
// deadlines, and the connection caps. (Body, write and budget bounds
// hold for any server the Ingress is the handler of.) It returns when ln
// fails or after Shutdown, with nil then.
func (in *Ingress) Serve(ln net.Listener) error {
	l := in.limits
	srv := &http.Server{
		Handler:           in,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		// No ReadTimeout or WriteTimeout: they would bound a whole
		// request, cutting long streams. The handler sets per-read and
		// per-write deadlines instead.
	}
	in.srvMu.Lock()
	if in.life.Err() != nil || in.srv != nil {
		in.srvMu.Unlock()
		return errors.New("ingress: Serve after Shutdown or Close, or twice")
	}
	in.srv = srv
	in.srvMu.Unlock()
	err := srv.Serve(newCapListener(ln, l.MaxConns, l.MaxConnsPerIP))
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops Serve: no new connections, idle ones closed, requests in
// flight given until ctx ends to finish.
func (in *Ingress) Shutdown(ctx context.Context) error {
	in.srvMu.Lock()
	srv := in.srv
	in.srvMu.Unlock()
	if srv == nil {
		return nil
	}
	return srv.Shutdown(ctx)
}
