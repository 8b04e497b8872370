package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/m2md/m2md/internal/daemonhook"
	"github.com/m2md/m2md/internal/testkit"
)

// smallCorpus is a corpus folder of two requests.
func smallCorpus(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"req-chat-tiny-01.json", "req-chat-1k-01.json"} {
		if err := os.WriteFile(filepath.Join(dir, name), testkit.CorpusFile(t, name), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestCLIDevCertFromAnyFolder: the daemon and the agents run from three
// different folders; the agents find the daemon's development certificate
// in the user's config folder, where the daemon's banner says it is, and
// pin it without --pin.
func TestCLIDevCertFromAnyFolder(t *testing.T) {
	cfgDir := userDirs(t)
	srv, url := startServe(t, t.TempDir())
	certDir := filepath.Join(cfgDir, "m2md", "certs")
	srv.waitOutput(regexp.QuoteMeta(`"cert":"`+filepath.Join(certDir, "cert.pem")+`"`), 10*time.Second)
	for name, want := range map[string]os.FileMode{"cert.pem": 0o644, "key.pem": 0o600} {
		info, err := os.Stat(filepath.Join(certDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm() != want {
			t.Errorf("%s has mode %04o, want %04o", name, info.Mode().Perm(), want)
		}
	}
	prov := startM2MD(t, t.TempDir(), "demo", "provider", "--url", url)
	prov.waitOutput(`provider \S+ connected`, 30*time.Second)
	req := startM2MD(t, t.TempDir(), "demo", "requester", "--url", url, "--corpus", smallCorpus(t))
	if code := req.wait(60 * time.Second); code != 0 || !strings.Contains(req.stdout.String(), "2 of 2 requests answered") {
		t.Fatalf("requester: exit %d\nstdout: %s\nstderr: %s", code, req.stdout.String(), req.stderr.String())
	}
}

// TestCLIAgentsDefaultIDsDistinct: two demo providers started alike get
// two ids, and neither replaces the other. They log in the format asked.
func TestCLIAgentsDefaultIDsDistinct(t *testing.T) {
	d := startTestDaemon(t, nil)
	url := "ws://" + d.WSAddr().String() + "/m2m"
	var ids []string
	var procs []*proc
	for range 2 {
		p := startM2MD(t, t.TempDir(), "demo", "provider", "--url", url, "--security", "none", "--log-format", "json")
		ids = append(ids, p.waitOutput(`provider (\S+) connected`, 30*time.Second))
		procs = append(procs, p)
		// The demo agents log as every command does: here JSON.
		p.waitOutput(`\{"level":"info".*"message":"session established"\}`, 10*time.Second)
		checkJSONLines(t, "demo provider", p.stderr.String())
	}
	if ids[0] == ids[1] {
		t.Fatalf("both providers took the id %s", ids[0])
	}
	for i, id := range ids {
		if !strings.HasPrefix(id, "demo-provider-") {
			t.Errorf("default id %q does not start with demo-provider-", id)
		}
		if _, ok := daemonhook.Of(d).AgentNode("", id); !ok || !procs[i].running() {
			t.Errorf("provider %s is gone (running %v)\nstderr: %s", id, procs[i].running(), procs[i].stderr.String())
		}
	}
}

// TestCLIUpstreamReplaced: a second upstream with the same --agent replaces
// the first, which exits 1 saying what to change; its JSON log has each key
// once per line.
func TestCLIUpstreamReplaced(t *testing.T) {
	d := startTestDaemon(t, nil)
	url := "ws://" + d.WSAddr().String() + "/m2m"
	args := []string{"upstream", "--url", url, "--security", "none", "--agent", "model-server", "--models", "m1",
		"--base-url", "http://127.0.0.1:9/v1", "--log-format", "json"}
	first := startM2MD(t, t.TempDir(), args...)
	// One model: "1 model", not "1 models".
	first.waitOutput(`upstream agent model-server serving 1 model from`, 30*time.Second)
	second := startM2MD(t, t.TempDir(), args...)
	second.waitOutput(`upstream agent model-server serving`, 30*time.Second)
	if code := first.wait(30 * time.Second); code != exitBadInput {
		t.Errorf("the replaced upstream exited %d, want %d", code, exitBadInput)
	}
	stderr := first.stderr.String()
	for _, want := range []string{"REPLACED", "--agent", `"model-server"`} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	checkJSONLines(t, "upstream", stderr)
	if !second.running() {
		t.Errorf("the second upstream exited: %s", second.stderr.String())
	}
}

// TestServeConfigExample: deploy/serve.conf is a config file the daemon
// starts with (an unknown or malformed line would stop it), and its lines
// take effect; the command line still wins (the test's listeners).
func TestServeConfigExample(t *testing.T) {
	userDirs(t)
	conf, err := filepath.Abs(filepath.Join("..", "..", "deploy", "serve.conf"))
	if err != nil {
		t.Fatal(err)
	}
	srv, url := startServe(t, t.TempDir(), "--config", conf)
	srv.waitOutput(`"min_security":"aead"`, 10*time.Second)
	// A session below the file's min-security is refused.
	weak := startM2MD(t, t.TempDir(), "demo", "requester", "--url", url, "--security", "hmac", "--corpus", smallCorpus(t))
	if code := weak.wait(time.Minute); code != exitBadInput || !strings.Contains(weak.stderr.String(), "SECURITY_POLICY") {
		t.Fatalf("an hmac session under min-security aead: exit %d: %s", code, weak.stderr.String())
	}
}
