package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/m2md/m2md/certs"
	"github.com/m2md/m2md/internal/leakcheck"
)

// TestNATSRunLeavesNothing: the NATS comparison's server, providers and
// requesters are gone when its run ends, and every request came back.
func TestNATSRunLeavesNothing(t *testing.T) {
	for _, tr := range []string{TransportWS, TransportQUIC} { // plain TCP, then TLS
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		rep, err := RunLoad(ctx, LoadConfig{Transport: tr, Compare: CompareNATS, Duration: 500 * time.Millisecond,
			Warmup: 100 * time.Millisecond, Connections: 2, Providers: 2, Concurrency: 8})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		n := rep.NATS
		if n == nil || n.RoundTrips == 0 || n.Errors != 0 || len(n.ProviderErrors) != 0 {
			t.Fatalf("%s: NATS run %+v", tr, n)
		}
		if want := wantNATSScheme[tr]; !strings.HasPrefix(n.Target, "in-process "+want) {
			t.Fatalf("%s: NATS target %q, want in-process %s", tr, n.Target, want)
		}
	}
	// quic-go and nats-server wind down a moment after their Close returns.
	if left := leakcheck.Wait(leakcheck.Settle); len(left) > 0 {
		t.Fatalf("%d goroutines left after the runs:\n\n%s", len(left), strings.Join(left, "\n\n"))
	}
}

// wantNATSScheme is how the NATS comparison reaches its embedded server
// beside each transport of the daemon's: over TLS beside the transports
// that encrypt, so that both sides of the comparison pay for encryption.
var wantNATSScheme = map[string]string{
	TransportWS:   "nats://",
	TransportWSS:  "tls://",
	TransportQUIC: "tls://",
}

// TestNATSEmbeddedTLS: beside an encrypting transport, the embedded
// nats-server's clients really speak TLS to it, as the server sees them.
func TestNATSEmbeddedTLS(t *testing.T) {
	certDir := t.TempDir()
	for _, tr := range []string{TransportWS, TransportWSS, TransportQUIC} {
		t.Run(tr, func(t *testing.T) {
			want := wantNATSScheme[tr]
			nt, err := startNATS(tr, certDir, 1024)
			if err != nil {
				t.Fatal(err)
			}
			defer nt.stop()
			if !strings.HasPrefix(nt.url, want) {
				t.Fatalf("URL %q, want %s…", nt.url, want)
			}
			nc, err := nt.connect()
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
			cz, err := nt.srv.Connz(nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(cz.Conns) != 1 {
				t.Fatalf("the server sees %d connections, want 1", len(cz.Conns))
			}
			if tlsSeen := cz.Conns[0].TLSVersion != ""; tlsSeen != (want == "tls://") {
				t.Fatalf("the server saw TLS version %q on the connection", cz.Conns[0].TLSVersion)
			}
		})
	}
}

// TestNATSURL: with --nats-url the NATS run goes to that server, whose
// counters see every request and reply, and not to an embedded one; over
// tls:// the connection is verified with the TLS settings given.
func TestNATSURL(t *testing.T) {
	for _, secure := range []bool{false, true} {
		name := "nats"
		if secure {
			name = "tls"
		}
		t.Run(name, func(t *testing.T) {
			opts := &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true}
			var clientTLS *tls.Config
			if secure {
				cert, fp, err := certs.EnsureDevCert(t.TempDir())
				if err != nil {
					t.Fatal(err)
				}
				if clientTLS, err = certs.ClientTLSConfig(certs.ClientOptions{PinSHA256: fp}); err != nil {
					t.Fatal(err)
				}
				opts.TLS, opts.TLSConfig, opts.TLSTimeout = true, certs.ServerTLSConfig(cert), 5
			}
			srv, err := server.NewServer(opts)
			if err != nil {
				t.Fatal(err)
			}
			go srv.Start()
			t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
			if !srv.ReadyForConnections(10 * time.Second) {
				t.Fatal("nats-server did not start")
			}
			url := "nats://" + srv.Addr().String()
			if secure {
				url = "tls://" + srv.Addr().String()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			rep, err := RunLoad(ctx, LoadConfig{Transport: TransportWS, Compare: CompareNATS, NATSURL: url, NATSTLS: clientTLS,
				Duration: 300 * time.Millisecond, Warmup: 100 * time.Millisecond, Connections: 2, Providers: 2, Concurrency: 8})
			if err != nil {
				t.Fatal(err)
			}
			n := rep.NATS
			if n == nil || n.RoundTrips == 0 || n.Errors != 0 || len(n.ProviderErrors) != 0 {
				t.Fatalf("NATS run %+v", n)
			}
			if n.Target != url || (natsName(n.Target) == "NATS (TLS)") != secure {
				t.Fatalf("NATS target %q (%s), want %s", n.Target, natsName(n.Target), url)
			}
			// The server saw the run's connections (closed by now) over TLS
			// exactly when the URL asked for it.
			cz, err := srv.Connz(&server.ConnzOptions{State: server.ConnClosed})
			if err != nil {
				t.Fatal(err)
			}
			if len(cz.Conns) == 0 {
				t.Fatal("the server saw no connections")
			}
			for _, c := range cz.Conns {
				if (c.TLSVersion != "") != secure {
					t.Fatalf("connection %d (%s): TLS version %q", c.Cid, c.Name, c.TLSVersion)
				}
			}
			vz, err := srv.Varz(nil)
			if err != nil {
				t.Fatal(err)
			}
			// Each round trip is a request and a reply through the server;
			// warm-up's come on top.
			if vz.InMsgs < 2*n.RoundTrips {
				t.Fatalf("the server saw %d messages for %d round trips", vz.InMsgs, n.RoundTrips)
			}
			if n.Process == nil || n.Process.IncludesDaemon || rep.Process == nil || !rep.Process.IncludesDaemon {
				t.Fatalf("the NATS run's CPU counts the server: %+v; the in-process M2M run's: %+v", n.Process, rep.Process)
			}
			if rep.NATSRatios.AllocsPerFrameExtra != nil {
				t.Fatal("the generator's allocations alone are compared with the daemon's and the generator's")
			}
			var table bytes.Buffer
			if err := rep.WriteTable(&table); err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(table.String(), "\n") {
				if strings.HasPrefix(strings.TrimSpace(line), "CPU/round trip") && !strings.HasSuffix(strings.TrimSpace(line), " -") {
					t.Fatalf("the table compares the generator's CPU with the daemon's and the generator's: %q", line)
				}
			}
			if note := placementNote(rep); !strings.Contains(note, "nats-server in its own") {
				t.Fatalf("no note that the servers ran in different places: %q", note)
			}
			// The run's agents and connections are gone; the server, which
			// is the user's, stays.
			if left := leakcheck.Wait(leakcheck.Settle, "github.com/m2md/m2md/", "github.com/nats-io/nats.go", "github.com/coder/websocket"); len(left) > 0 {
				t.Fatalf("%d goroutines left after the run:\n\n%s", len(left), strings.Join(left, "\n\n"))
			}
		})
	}
	if _, err := RunLoad(context.Background(), LoadConfig{Transport: TransportWS, Compare: CompareNATS, NATSURL: "nats://127.0.0.1:1",
		Duration: 100 * time.Millisecond, Warmup: 0, Connections: 1, Providers: 1, Concurrency: 1}); err == nil || !strings.Contains(err.Error(), "nats") {
		t.Fatalf("a nats-server that is not there: %v", err)
	}
}

// TestPlacementNote: the table warns exactly when one server of a
// comparison shared this process with the load generator and the other did
// not.
func TestPlacementNote(t *testing.T) {
	relay := &Result{Target: "ws://127.0.0.1:3/"}
	for _, tc := range []struct {
		m2m, nats string // "" for no NATS run
		relay     *Result
		want      string
	}{
		{"in-process ws://127.0.0.1:1/m2m", "in-process nats://127.0.0.1:2", relay, ""},
		{"ws://127.0.0.1:1/m2m", "nats://127.0.0.1:2", nil, ""},
		{"in-process ws://127.0.0.1:1/m2m", "nats://127.0.0.1:2", nil, "drop --nats-url"},
		{"ws://127.0.0.1:1/m2m", "in-process nats://127.0.0.1:2", nil, "Give --nats-url too"},
		{"ws://127.0.0.1:1/m2m", "", nil, ""},
		{"ws://127.0.0.1:1/m2m", "", relay, "M2M/relay is\nnot like for like"},
		{"in-process ws://127.0.0.1:1/m2m", "", relay, ""},
	} {
		r := &LoadReport{Result: Result{Target: tc.m2m}, Baseline: tc.relay}
		if tc.nats != "" {
			r.NATS = &Result{Target: tc.nats}
		}
		got := placementNote(r)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("M2M at %s, NATS at %q, relay %v: note %q, want one with %q", tc.m2m, tc.nats, tc.relay != nil, got, tc.want)
		}
	}
}
