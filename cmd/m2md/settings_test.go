package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/m2md/m2md/cluster"
	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/internal/bench"
	"github.com/m2md/m2md/openai/ingress"
	"github.com/m2md/m2md/openai/upstream"
)

// TestSettingsNameConfigFields: every field a flag table names is a field
// of the Config it says, so that a library's error naming it reads as the
// flag; and no flag is declared twice.
func TestSettingsNameConfigFields(t *testing.T) {
	types := map[string]reflect.Type{
		"daemon.Config":    reflect.TypeFor[daemon.Config](),
		"cluster.Config":   reflect.TypeFor[cluster.Config](),
		"ingress.Config":   reflect.TypeFor[ingress.Config](),
		"ingress.Limits":   reflect.TypeFor[ingress.Limits](),
		"upstream.Config":  reflect.TypeFor[upstream.Config](),
		"bench.LoadConfig": reflect.TypeFor[bench.LoadConfig](),
	}
	var serve serveOptions
	var load loadOptions
	tables := map[string]settings{
		"serve":      serve.settings(),
		"upstream":   new(upstreamFlags).settings("", defaultUpstreamBaseURL),
		"bench load": load.settings(),
	}
	for cmd, table := range tables {
		seen := map[string]bool{}
		for _, s := range table {
			if seen[s.flag] {
				t.Errorf("%s: --%s declared twice", cmd, s.flag)
			}
			seen[s.flag] = true
			for _, f := range strings.Fields(s.field) {
				i := strings.LastIndex(f, ".")
				typ, ok := types[f[:max(i, 0)]]
				if !ok {
					t.Errorf("%s --%s: %s is not a field of a known Config", cmd, s.flag, f)
					continue
				}
				if _, ok := typ.FieldByName(f[i+1:]); !ok {
					t.Errorf("%s --%s: %s has no field %s", cmd, s.flag, typ, f[i+1:])
				}
			}
		}
	}
}

// TestTranslateNamesFlags: a library's Config error reads with the flags
// that set the fields it names, longest name first, and still wraps what
// it wrapped; other errors pass unchanged.
func TestTranslateNamesFlags(t *testing.T) {
	var o serveOptions
	flags := o.settings()
	_, err := daemon.New(daemon.Config{MaxSessions: -1, CertDir: t.TempDir()})
	got := flags.translate(err)
	if !errors.Is(got, daemon.ErrConfig) {
		t.Fatalf("%v no longer wraps daemon.ErrConfig", got)
	}
	if want := "daemon: invalid configuration: --max-sessions is -1; it must be positive (0 means the default, 10000)"; got.Error() != want {
		t.Fatalf("%q, want %q", got, want)
	}
	_, _, err = cluster.LoadIdentity("/nonexistent/cert.pem", "/nonexistent/key.pem", "")
	if got := flags.translate(err).Error(); !strings.HasPrefix(got, "cluster: --cluster-tls-cert/--cluster-tls-key: ") {
		t.Fatalf("%q does not name both flags of the certificate", got)
	}
	plain := errors.New("daemon.Config.MaxSessions in a message that is no Config error")
	if got := flags.translate(plain); got != plain {
		t.Fatalf("%v changed", got)
	}
	if got := (settings{{"daemon.Config.MaxSessions", "all", nil, ""}, {"daemon.Config.MaxSessionsPerIP", "per-ip", nil, ""}}).flagNames().Replace("daemon.Config.MaxSessionsPerIP and daemon.Config.MaxSessions"); got != "--per-ip and --all" {
		t.Fatalf("%q: a name read as a shorter one", got)
	}
}

// TestLogWriterNamesFlags: a library's log line naming a Config field
// reads with the flag, whatever the log format.
func TestLogWriterNamesFlags(t *testing.T) {
	var o serveOptions
	flags := o.settings()
	for _, format := range []string{"json", "console"} {
		var buf bytes.Buffer
		log, err := newLogger("info", format, flags.logWriter(&buf))
		if err != nil {
			t.Fatal(err)
		}
		log.Warn().Msg("running OPEN (set daemon.Config.OrgSecrets for production)")
		if got := buf.String(); !strings.Contains(got, "set --org-secrets-file for production") || strings.Contains(got, "Config.") {
			t.Errorf("%s: %q", format, got)
		}
	}
}

// TestCLIConfigErrorsNameFlags: what the libraries refuse in their Config
// (daemon, cluster, ingress, upstream) reaches the user naming the flag to
// change, never the Go field.
func TestCLIConfigErrorsNameFlags(t *testing.T) {
	dir := t.TempDir()
	secrets := filepath.Join(dir, "secrets")
	if err := os.WriteFile(secrets, []byte("acme 000102030405060708090a0b0c0d0e0f\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	off := []string{"--quic-addr", "-", "--ws-addr", "-", "--admin-addr", "-", "--openai-addr", "-", "--cert-dir", dir}
	serve := func(args ...string) []string { return append(append([]string{"serve"}, off...), args...) }
	for _, tc := range []cliCase{
		{name: "negative count", args: serve("--max-sessions", "-1"), code: exitUsage, stderr: []string{"--max-sessions is -1; it must be positive"}},
		{name: "negative duration", args: serve("--message-timeout", "-1s"), code: exitUsage, stderr: []string{"--message-timeout is -1s"}},
		{name: "listen address", args: []string{"serve", "--ws-addr", "8080", "--cert-dir", dir}, code: exitUsage, stderr: []string{`--ws-addr "8080": want host:port`}},
		{name: "plain ws beyond loopback", args: []string{"serve", "--quic-addr", "-", "--admin-addr", "-", "--openai-addr", "-", "--cert-dir", dir, "--ws-addr", "0.0.0.0:0", "--org-secrets-file", secrets},
			code: exitUsage, stderr: []string{"--ws-addr 0.0.0.0:0 serves plain ws://", "(--org-secrets-file)", "--wss-addr", "--allow-insecure-ws"}},
		{name: "cluster beyond loopback", args: serve("--cluster-listen", "0.0.0.0:0"), code: exitUsage, stderr: []string{"--cluster-listen 0.0.0.0:0 is reachable", "--cluster-tls-cert/--cluster-tls-key and --cluster-tls-ca"}},
		{name: "cluster routes without listener", args: serve("--cluster-routes", "nats://127.0.0.1:6222"), code: exitUsage, stderr: []string{"without --cluster-listen (embedded NATS) or --nats-url"}},
		{name: "cluster user without password", args: serve("--cluster-listen", "127.0.0.1:0", "--cluster-user", "u"), code: exitUsage, stderr: []string{"set both --cluster-user and --cluster-password-file"}},
		{name: "cluster inbox", args: serve("--cluster-listen", "127.0.0.1:0", "--cluster-inbox", "-1"), code: exitUsage, stderr: []string{"--cluster-inbox -1: want 1 to"}},
		{name: "node id", args: serve("--nats-url", "nats://127.0.0.1:4222", "--cluster-node", "a.b"), code: exitUsage, stderr: []string{`--cluster-node "a.b"`}},
		{name: "external NATS without credentials", args: serve("--nats-url", "tls://10.0.0.9:4222"), code: exitUsage, stderr: []string{"authenticate this node with --nats-creds or --nats-nkey"}},
		{name: "node certificate unreadable", args: serve("--cluster-tls-cert", dir+"/none.pem", "--cluster-tls-key", dir+"/none.key"), code: exitBadInput, stderr: []string{"cluster: --cluster-tls-cert/--cluster-tls-key: open"}},
		{name: "disabled feature", args: serve("--disable-features", "nope"), code: exitUsage, stderr: []string{"--disable-features: ", "nope"}},
		{name: "upstream base URL", args: []string{"upstream", "--base-url", "ftp://x"}, code: exitUsage, stderr: []string{"--base-url: want http(s)://"}},
		{name: "upstream negative timeout", args: []string{"upstream", "--base-url", "http://127.0.0.1:9/v1", "--first-byte-timeout", "-1s"}, code: exitUsage, stderr: []string{"--first-byte-timeout is -1s"}},
	} {
		tc.notStderr = append(tc.notStderr, "Config.", "Limits.")
		t.Run(tc.name, tc.check)
	}
}

// TestServeLogsNameFlags: the daemon's advice in its log names the serve
// flags, as its errors do.
func TestServeLogsNameFlags(t *testing.T) {
	p, _ := startServe(t, t.TempDir())
	p.waitOutput(`\(set --org-secrets-file for production\)`, 20*time.Second)
	p.waitOutput(`\(--tls-cert/--tls-key for production\)`, 20*time.Second)
	if out := p.stderr.String(); strings.Contains(out, "Config.") {
		t.Errorf("the log names a Go field:\n%s", out)
	}
}
