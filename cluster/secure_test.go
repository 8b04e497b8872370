package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/m2md/m2md/internal/testkit"
)

// TestConfigRefusesInsecureLinks: a link another machine could join or
// read is refused (ErrInsecure), naming the field to set; loopback keeps its
// zero-configuration behaviour.
func TestConfigRefusesInsecureLinks(t *testing.T) {
	cert, ca := &tls.Certificate{}, x509.NewCertPool()
	mtls := func(c Config) Config { c.Cert, c.CA = cert, ca; return c }
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // "" = accepted
	}{
		{"loopback, nothing", Config{Listen: "127.0.0.1:6222", Routes: []string{"nats://127.0.0.1:6223", "nats://localhost:6224"}}, ""},
		{"loopback v6, nothing", Config{Listen: "[::1]:6222", Routes: []string{"nats://[::1]:6223"}}, ""},
		{"loopback, password", Config{Listen: "127.0.0.1:6222", User: "u", Password: "p"}, ""},
		{"all interfaces, nothing", Config{Listen: "0.0.0.0:6222"}, "cluster.Config.CA"},
		{"empty host, nothing", Config{Listen: ":6222"}, "cluster.Config.Cert"},
		{"LAN, password alone", Config{Listen: "10.0.0.1:6222", User: "u", Password: "p"}, "password alone"},
		{"LAN, TLS without CA", Config{Listen: "10.0.0.1:6222", Cert: cert}, "cluster.Config.CA"},
		{"loopback, TLS without CA", Config{Listen: "127.0.0.1:6222", Cert: cert}, "cluster.Config.CA"},
		{"CA without certificate", Config{Listen: "127.0.0.1:6222", CA: ca}, "cluster.Config.Cert"},
		{"LAN, mutual TLS", mtls(Config{Listen: "10.0.0.1:6222", Routes: []string{"nats://10.0.0.2:6222"}}), ""},
		{"LAN, mutual TLS and password", mtls(Config{Listen: "10.0.0.1:6222", User: "u", Password: "p"}), ""},
		{"loopback listener, route off the machine", Config{Listen: "127.0.0.1:6222", Routes: []string{"nats://10.0.0.2:6222"}}, "cluster.Config.Routes entry nats://10.0.0.2:6222"},
		{"route off the machine, password redacted", Config{Listen: "127.0.0.1:6222", Routes: []string{"nats://u:hunter2@db.example:6222"}}, "db.example:6222"},
		{"external loopback, nothing", Config{URLs: []string{"nats://127.0.0.1:4222"}}, ""},
		{"external bare host:port on loopback", Config{URLs: []string{"localhost:4222"}}, ""},
		{"external LAN, plain", Config{URLs: []string{"nats://10.0.0.9:4222"}, CredsFile: "n.creds"}, "tls://"},
		{"external LAN, password in URL over TLS", mtls(Config{URLs: []string{"tls://u:p@10.0.0.9:4222"}}), "cluster.Config.CredsFile"},
		{"external LAN, TLS and creds, no node certificate", Config{URLs: []string{"tls://10.0.0.9:4222"}, CredsFile: "n.creds"}, "cluster.Config.Cert"},
		{"external LAN, tls:// and creds", mtls(Config{URLs: []string{"tls://10.0.0.9:4222"}, CredsFile: "n.creds"}), ""},
		{"external LAN, --nats-ca and nkey", mtls(Config{URLs: []string{"nats://nats.example:4222"}, CAFile: "ca.pem", NkeyFile: "n.nk"}), ""},
		{"external, one of two URLs off loopback", Config{URLs: []string{"nats://127.0.0.1:4222", "nats://10.0.0.9:4222"}}, "10.0.0.9"},
		{"external, bad scheme", Config{URLs: []string{"http://127.0.0.1:4222"}}, "cluster.Config.URLs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Check()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			if ce := (*ConfigError)(nil); !errors.As(err, &ce) {
				t.Fatalf("%v is not a ConfigError", err)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("error shows the password: %v", err)
			}
			if strings.Contains(tc.want, "cluster.Config.") && !errors.Is(err, ErrInsecure) && !strings.Contains(tc.name, "scheme") {
				t.Fatalf("%v does not wrap ErrInsecure", err)
			}
		})
	}
}

// TestBusyRoutePort: a route port another process holds fails Start at
// once, saying so, instead of after the readiness wait.
func TestBusyRoutePort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := Start(Config{Listen: l.Addr().String()}, &recorder{})
	if err == nil {
		c.Close()
		t.Fatal("started on a busy port")
	}
	if !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("error %q: want \"address already in use\"", err)
	}
	testkit.WantConfigError(t, err, "cluster.Config.Listen", "cluster.Config.Listen "+l.Addr().String())
}

// TestLinkProtection: what the start log and m2md_cluster_links call each
// configuration.
func TestLinkProtection(t *testing.T) {
	cert, ca := &tls.Certificate{}, x509.NewCertPool()
	for _, tc := range []struct {
		cfg         Config
		route, nats string
	}{
		{Config{Listen: "127.0.0.1:0"}, ProtectNone, ProtectToken},
		{Config{Listen: "127.0.0.1:0", User: "u", Password: "p"}, ProtectPassword, ProtectToken},
		{Config{Listen: "10.0.0.1:0", Cert: cert, CA: ca}, ProtectMTLS, ProtectToken},
		{Config{URLs: []string{"nats://127.0.0.1:4222"}}, ProtectNone, ProtectNone},
		{Config{URLs: []string{"nats://u:p@127.0.0.1:4222"}}, ProtectNone, ProtectPassword},
		{Config{URLs: []string{"127.0.0.1:4222"}, NkeyFile: "n.nk"}, ProtectNone, ProtectCreds},
		{Config{URLs: []string{"tls://127.0.0.1:4222"}}, ProtectNone, ProtectTLS},
		{Config{URLs: []string{"nats://10.0.0.9:4222"}, CAFile: "ca.pem", CredsFile: "n.creds"}, ProtectNone, ProtectTLSCreds},
	} {
		if r, n := tc.cfg.routeProtection(), tc.cfg.natsProtection(); r != tc.route || n != tc.nats {
			t.Errorf("%+v: route %s nats %s, want %s %s", tc.cfg, r, n, tc.route, tc.nats)
		}
	}
}

// TestNkeyJoin: --nats-nkey authenticates a node to a NATS server that
// admits only that nkey; without it, or with another seed, Start fails.
func TestNkeyJoin(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true,
		Nkeys: []*server.NkeyUser{{Nkey: pub}}})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(5 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	dir := t.TempDir()
	seedFile := filepath.Join(dir, "node.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	other, _ := nkeys.CreateUser()
	otherSeed, _ := other.Seed()
	otherFile := filepath.Join(dir, "other.nk")
	if err := os.WriteFile(otherFile, otherSeed, 0o600); err != nil {
		t.Fatal(err)
	}
	url := "nats://" + ns.Addr().String()
	for _, nk := range []string{"", otherFile, filepath.Join(dir, "missing.nk")} {
		if c, err := Start(Config{URLs: []string{url}, NkeyFile: nk}, &recorder{}); err == nil {
			c.Close()
			t.Fatalf("joined with nkey file %q", nk)
		}
	}
	ha, hb := &recorder{}, &recorder{}
	a := startNode(t, Config{URLs: []string{url}, NkeyFile: seedFile, Node: "a"}, ha)
	a.Announce(Agent{ID: "p1", Session: "s1", Models: []string{"m"}, Stamp: 1})
	startNode(t, Config{URLs: []string{url}, NkeyFile: seedFile, Node: "b"}, hb)
	hb.wait(t, "b learns p1", func() bool { return len(hb.up) == 1 })
	if n := a.Links(ProtectCreds); n != 1 {
		t.Fatalf("%d links counted as %s, want 1", n, ProtectCreds)
	}
}

// FuzzCheckLinks: any Listen, Routes and URLs is accepted or refused with
// a ConfigError, never a panic, and an error never shows a URL's password.
func FuzzCheckLinks(f *testing.F) {
	f.Add("10.0.0.1:6222", "nats://u:hunter2@10.0.0.2:6222", "", false)
	f.Add("", "", "tls://u:hunter2@10.0.0.9:4222", true)
	f.Add("[::1]:0", "nats://[::1]:1", "", false)
	f.Add("", "", "u:hunter2@nats.example:4222", false)
	f.Fuzz(func(t *testing.T, listen, route, natsURL string, mtls bool) {
		c := Config{Listen: listen, URLs: splitNonEmpty(natsURL)}
		if listen != "" {
			c.Routes = splitNonEmpty(route)
		}
		if mtls {
			c.Cert, c.CA = &tls.Certificate{}, x509.NewCertPool()
		}
		err := c.Check()
		if ce := (*ConfigError)(nil); err != nil && !errors.As(err, &ce) {
			t.Fatalf("%v is not a ConfigError", err)
		}
		// A password the inputs hold only as one URL's userinfo.
		inUserinfo := strings.Count(listen+route+natsURL, "hunter2") == 1 && strings.Contains(route+natsURL, ":hunter2@")
		if err != nil && inUserinfo && strings.Contains(err.Error(), "hunter2") {
			t.Fatalf("error shows a password: %v", err)
		}
	})
}

func splitNonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}
