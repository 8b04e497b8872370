package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime/pprof"
	"time"

	"github.com/m2md/m2md/certs"
	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/frame"
)

// Profile labels. Every goroutine inherits the labels of the goroutine that
// started it, so the daemon's goroutines (its listeners, sessions, and the
// transport's and quic-go's goroutines it starts) carry role=daemon, the
// bare relay's role=relay and the generator's role=loadgen. A CPU profile
// of the whole process then splits by role:
//
//	go tool pprof -tags cpu.prof
//	go tool pprof -tagfocus=role=daemon -top cpu.prof
const (
	labelRole    = "role"
	roleDaemon   = "daemon"
	roleRelay    = "relay"
	roleLoadgen  = "loadgen"
	startTimeout = 10 * time.Second
)

// withRole runs f with the role label set, so that the goroutines f starts
// carry it.
func withRole(ctx context.Context, role string, f func(context.Context)) {
	pprof.Do(ctx, pprof.Labels(labelRole, role), f)
}

// inprocDaemon is a daemon running in this process on loopback.
type inprocDaemon struct {
	srv    *daemon.Server
	cancel context.CancelFunc
	done   chan error
}

// startDaemon starts a daemon on ephemeral loopback ports (QUIC, ws and
// wss), its development certificate in certDir, and waits until it listens.
func startDaemon(certDir string, minSecurity frame.Security) (*inprocDaemon, error) {
	srv, err := daemon.New(daemon.Config{
		QUICAddr:      "127.0.0.1:0",
		WSAddr:        "127.0.0.1:0",
		WSSAddr:       "127.0.0.1:0",
		AdminAddr:     "-",
		CertDir:       certDir,
		MinSecurity:   minSecurity,
		ShutdownGrace: time.Second,
		CloseTimeout:  time.Second,
		// The limits stay at their defaults: what a load test meets is
		// what a zero-config `m2md serve` does.
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &inprocDaemon{srv: srv, cancel: cancel, done: make(chan error, 1)}
	withRole(ctx, roleDaemon, func(ctx context.Context) {
		go func() { d.done <- srv.Run(ctx) }()
	})
	select {
	case <-srv.Ready():
		return d, nil
	case err := <-d.done:
		cancel()
		if err == nil {
			err = errors.New("daemon stopped at once")
		}
		return nil, fmt.Errorf("bench: in-process daemon: %w", err)
	case <-time.After(startTimeout):
		cancel()
		return nil, errors.New("bench: in-process daemon did not start in 10 s")
	}
}

// endpoint is where agents reach the daemon over transport tr.
func (d *inprocDaemon) endpoint(tr string) (endpoint, error) {
	tc, err := certs.ClientTLSConfig(certs.ClientOptions{PinSHA256: d.srv.Fingerprint()})
	if err != nil {
		return endpoint{}, err
	}
	switch tr {
	case TransportQUIC:
		return endpoint{transport: tr, addr: d.srv.QUICAddr().String(), tls: tc}, nil
	case TransportWS:
		return endpoint{transport: tr, addr: "ws://" + d.srv.WSAddr().String() + daemon.DefaultWSPath}, nil
	case TransportWSS:
		return endpoint{transport: tr, addr: "wss://" + d.srv.WSSAddr().String() + daemon.DefaultWSPath, tls: tc}, nil
	}
	return endpoint{}, fmt.Errorf("bench: unknown transport %q (want quic, ws or wss)", tr)
}

// stop shuts the daemon down and waits for it.
func (d *inprocDaemon) stop() error {
	d.cancel()
	select {
	case err := <-d.done:
		return err
	case <-time.After(15 * time.Second):
		return errors.New("bench: in-process daemon did not stop in 15 s")
	}
}
