package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/m2md/m2md/certs"
	"github.com/m2md/m2md/cluster"
	"github.com/m2md/m2md/internal/testkit"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/security"
)

// TestConfigZeroIsDefault: the zero Config gets the daemon's defaults and
// negotiate's, filled in once each.
func TestConfigZeroIsDefault(t *testing.T) {
	s, err := New(Config{CertDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	c := s.cfg
	for _, tc := range []struct {
		name      string
		got, want any
	}{
		{"QUICAddr", c.QUICAddr, DefaultQUICAddr},
		{"MaxSessions", c.MaxSessions, DefaultMaxSessions},
		{"MaxOutstanding", c.MaxOutstanding, DefaultMaxOutstanding},
		{"SendQueueLen", c.SendQueueLen, DefaultSendQueueLen},
		{"MaxSessionsPerIP", c.MaxSessionsPerIP, 0},
		{"NewSessionsPerMinute", c.NewSessionsPerMinute, DefaultNewSessionsPerMinute},
		{"MessagesPerMinute", c.MessagesPerMinute, 0},
		{"MaxPayload", c.MaxPayload, negotiate.MaxPayloadLimit},
		{"ReplayCacheSize", c.ReplayCacheSize, negotiate.DefaultReplayCacheSize},
		{"HelloTimeout", c.HelloTimeout, negotiate.HelloTimeout},
		{"CloseTimeout", c.CloseTimeout, negotiate.CloseTimeout},
		{"SessionTimeout", c.SessionTimeout, negotiate.DefaultSessionTimeout},
		{"PingInterval", c.PingInterval, negotiate.DefaultPingInterval},
		{"PongTimeout", c.PongTimeout, negotiate.DefaultPongTimeout},
		{"ShutdownGrace", c.ShutdownGrace, DefaultShutdownGrace},
		{"SlowConsumerGrace", c.SlowConsumerGrace, DefaultSlowGrace},
		{"BusyPingAfter", c.BusyPingAfter, DefaultBusyPingAfter},
		{"BusyPongTimeout", c.BusyPongTimeout, DefaultBusyPongTimeout},
		{"FailoverBytes", c.FailoverBytes, DefaultFailoverBytes},
		{"QUICIdleTimeout", c.QUICIdleTimeout, DefaultQUICIdleTimeout},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
}

// TestConfigNegativeAndOutOfRange: a negative number is an error (a
// ConfigError naming the field), except where it means unlimited;
// negotiate's ranges are checked once, by negotiate, and reported as a
// ConfigError naming the daemon's field, not negotiate's.
func TestConfigNegativeAndOutOfRange(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   Config
		ok    bool
		field string // the ConfigError's, when the daemon checks the field itself
	}{
		{"max sessions -1", Config{MaxSessions: -1}, false, "daemon.Config.MaxSessions"},
		{"max outstanding -1", Config{MaxOutstanding: -1}, false, "daemon.Config.MaxOutstanding"},
		{"affinity entries -1", Config{AffinityEntries: -1}, false, "daemon.Config.AffinityEntries"},
		{"receive budget -1", Config{ReceiveBudget: -1}, false, "daemon.Config.ReceiveBudget"},
		{"send queue -1", Config{SendQueueLen: -1}, false, "daemon.Config.SendQueueLen"},
		{"slow consumer grace -1s", Config{SlowConsumerGrace: -time.Second}, false, "daemon.Config.SlowConsumerGrace"},
		{"message timeout -1s", Config{MessageTimeout: -time.Second}, false, "daemon.Config.MessageTimeout"},
		{"QUIC idle timeout -1s", Config{QUICIdleTimeout: -time.Second}, false, "daemon.Config.QUICIdleTimeout"},
		{"busy ping after -1s", Config{BusyPingAfter: -time.Second}, false, "daemon.Config.BusyPingAfter"},
		{"busy pong timeout -1s", Config{BusyPongTimeout: -time.Second}, false, "daemon.Config.BusyPongTimeout"},
		{"failover bytes -1: off", Config{FailoverBytes: -1}, true, ""},
		{"hello timeout -1s", Config{HelloTimeout: -time.Second}, false, "daemon.Config.HelloTimeout"},
		{"close timeout -1s", Config{CloseTimeout: -time.Second}, false, "daemon.Config.CloseTimeout"},
		{"shutdown grace -1s", Config{ShutdownGrace: -time.Second}, false, "daemon.Config.ShutdownGrace"},
		{"unknown security mode", Config{MinSecurity: 9}, false, "daemon.Config.MinSecurity"},
		{"unknown feature disabled", Config{DisableFeatures: []negotiate.Feature{"nope"}}, false, "daemon.Config.DisableFeatures"},
		{"cluster setting", Config{Cluster: cluster.Config{Listen: "127.0.0.1:0", Inbox: -1}}, false, "cluster.Config.Inbox"},
		{"unlimited handshakes", Config{MaxHandshakes: -1, MaxHandshakesPerIP: -1}, true, ""},
		{"max payload -1", Config{MaxPayload: -1}, false, "daemon.Config.MaxPayload"},
		{"max payload 32 MiB", Config{MaxPayload: 32 << 20}, false, "daemon.Config.MaxPayload"},
		{"max payload 100 B", Config{MaxPayload: 100}, false, "daemon.Config.MaxPayload"},
		{"session timeout 10s", Config{SessionTimeout: 10 * time.Second}, false, "daemon.Config.SessionTimeout"},
		{"ping beyond session timeout", Config{SessionTimeout: time.Minute, PingInterval: 2 * time.Minute}, false, "daemon.Config.PingInterval"},
		{"pong beyond ping interval", Config{PingInterval: 5 * time.Second, PongTimeout: 6 * time.Second}, false, "daemon.Config.PongTimeout"},
		{"negative replay cache", Config{ReplayCacheSize: -1}, false, "daemon.Config.ReplayCacheSize"},
		{"unlimited per-IP limits", Config{MaxSessionsPerIP: -1, NewSessionsPerMinute: -1}, true, ""},
		{"unlimited session rates", Config{MessagesPerMinute: -1, BytesPerSecond: -1}, true, ""},
		{"short session timeout takes a shorter ping", Config{SessionTimeout: time.Minute}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.CertDir = t.TempDir()
			_, err := New(tc.cfg)
			if tc.ok && err != nil {
				t.Fatal(err)
			}
			if !tc.ok && !errors.Is(err, ErrConfig) {
				t.Fatalf("got %v, want ErrConfig", err)
			}
			if tc.field != "" {
				testkit.WantConfigError(t, err, tc.field, tc.field)
			}
		})
	}
}

// Plain ws:// beyond loopback is refused when agents authenticate, unless
// allowed (security review finding 11): without TLS only frame bodies are
// protected.
func TestInsecureWSRefusedWithOrgSecrets(t *testing.T) {
	secrets := map[string]security.Secret{"acme": security.Secret("0123456789abcdef0123456789abcdef")}
	for _, tc := range []struct {
		name    string
		cfg     Config
		refused bool
	}{
		{"open mode, all interfaces", Config{WSAddr: ":8080"}, false},
		{"secrets, default loopback", Config{OrgSecrets: secrets}, false},
		{"secrets, ::1", Config{OrgSecrets: secrets, WSAddr: "[::1]:0"}, false},
		{"secrets, localhost", Config{OrgSecrets: secrets, WSAddr: "localhost:0"}, false},
		{"secrets, ws off", Config{OrgSecrets: secrets, WSAddr: "-"}, false},
		{"secrets, all interfaces", Config{OrgSecrets: secrets, WSAddr: ":8080"}, true},
		{"secrets, public address", Config{OrgSecrets: secrets, WSAddr: "192.0.2.1:8080"}, true},
		{"secrets, host name", Config{OrgSecrets: secrets, WSAddr: "m2md.example:8080"}, true},
		{"secrets, allowed", Config{OrgSecrets: secrets, WSAddr: "0.0.0.0:8080", AllowInsecureWS: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.cfg.withDefaults()
			if got := errors.Is(err, ErrConfig); got != tc.refused {
				t.Fatalf("err %v, refused %t, want %t", err, got, tc.refused)
			}
			if tc.refused {
				testkit.WantConfigError(t, err, "daemon.Config.WSAddr", "daemon.Config.AllowInsecureWS")
			}
		})
	}
}

// TestConfigCertDirDefault: without CertDir the development certificate
// is made in the user's config folder, the one the CLI's agents pin from,
// whatever the working directory; a real certificate needs no folder.
func TestConfigCertDirDefault(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, "config"))
	t.Chdir(t.TempDir())
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(home, "config", "m2md", "certs")
	if s.cfg.CertDir != want {
		t.Errorf("CertDir %q, want %q", s.cfg.CertDir, want)
	}
	if _, err := os.Stat(filepath.Join(want, certs.DevCertFile)); err != nil {
		t.Errorf("no development certificate in the default folder: %v", err)
	}
	if _, err := os.Stat("certs"); err == nil {
		t.Error("a ./certs folder was made in the working directory")
	}
}

// TestConfigListenAddr: a listen address that cannot be listened on is
// ErrConfig, a ConfigError naming the field, before anything starts.
func TestConfigListenAddr(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   Config
		field string
		want  string
	}{
		{"port only", Config{QUICAddr: "4433"}, "daemon.Config.QUICAddr", `daemon.Config.QUICAddr "4433": want host:port, such as 127.0.0.1:4433`},
		{"host only", Config{WSAddr: "localhost"}, "daemon.Config.WSAddr", `daemon.Config.WSAddr "localhost"`},
		{"no port", Config{AdminAddr: "127.0.0.1:"}, "daemon.Config.AdminAddr", `daemon.Config.AdminAddr "127.0.0.1:"`},
		{"wss", Config{WSSAddr: "::1"}, "daemon.Config.WSSAddr", `daemon.Config.WSSAddr "::1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.CertDir = t.TempDir()
			_, err := New(tc.cfg)
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("%v, want ErrConfig", err)
			}
			testkit.WantConfigError(t, err, tc.field, tc.want)
		})
	}
	for _, ok := range []string{"-", ":4433", "0.0.0.0:0", "[::1]:4433", "localhost:8080"} {
		if err := CheckListenAddr("daemon.Config.QUICAddr", ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
}
