package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// docCommands returns the commands of the first ```sh block after marker
// in the document at path (relative to the repository root), one slice of
// words per command, with ~ expanded to $HOME. A command ending in & runs
// in the background.
func docCommands(t *testing.T, path, marker string) [][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", path))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), marker)
	if !ok {
		t.Fatalf("%s has no %q", path, marker)
	}
	_, block, ok := strings.Cut(after, "```sh\n")
	if !ok {
		t.Fatalf("%s: no ```sh block after %q", path, marker)
	}
	block, _, _ = strings.Cut(block, "```")
	var cmds [][]string
	for _, line := range strings.Split(block, "\n") {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		line = strings.ReplaceAll(line, "~/", os.Getenv("HOME")+"/")
		words := strings.Fields(line)
		if words[0] != "m2md" {
			t.Fatalf("%s: %q is not an m2md command", path, line)
		}
		cmds = append(cmds, words[1:])
	}
	return cmds
}

// TestDocsAuthenticatedAgents runs docs/operations.md's "Authenticated
// agents" commands as written (the daemon and the agents on ports of their
// own): an org secret, two derived agent keys, a daemon that requires
// them, a provider and a requester of the org that round-trip every corpus
// request. Then a requester with another agent's key is refused.
func TestDocsAuthenticatedAgents(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, ".config"))
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	url := ""
	var last *proc
	for _, args := range docCommands(t, "docs/operations.md", "<!-- authenticated-agents:") {
		background := args[len(args)-1] == "&"
		if background {
			args = args[:len(args)-1]
		}
		switch {
		case args[0] == "serve":
			args = append(args, "--quic-addr", "127.0.0.1:0", "--ws-addr", "-", "--admin-addr", "-", "--log-format", "json")
		case args[0] == "demo":
			if url == "" {
				t.Fatalf("%v runs before the daemon", args)
			}
			args = append(args, "--url", url)
		}
		p := startM2MD(t, repo, args...)
		switch {
		case args[0] == "serve":
			url = p.waitOutput(`"quic":"(quic://127\.0\.0\.1:\d+)"`, 60*time.Second)
		case background && args[0] == "demo":
			p.waitOutput(`provider \S+ connected`, 30*time.Second)
		case background:
			t.Fatalf("no readiness check for %v", args)
		default:
			if code := p.wait(2 * time.Minute); code != 0 {
				t.Fatalf("m2md %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, p.stdout.String(), p.stderr.String())
			}
		}
		last = p
	}
	if last == nil || !strings.Contains(last.stdout.String(), "requests answered, 0 failed") {
		t.Fatalf("the last command is not a requester that got every answer: %s", last.stdout.String())
	}
	for _, f := range []string{"orgs", "agents/alice.key", "agents/bob.key"} {
		info, err := os.Stat(filepath.Join(home, ".config", "m2md", f))
		if err != nil || info.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, mode %v: want 0600", f, err, info.Mode())
		}
	}

	// bob with alice's key is refused, and told what to check.
	wrong := startM2MD(t, repo, "demo", "requester", "--org", "acme", "--agent", "bob", "--url", url, "--corpus", smallCorpus(t),
		"--agent-key-file", filepath.Join(home, ".config", "m2md", "agents", "alice.key"))
	if code := wrong.wait(time.Minute); code != exitBadInput {
		t.Fatalf("a wrong key: exit %d, want %d\nstdout: %s\nstderr: %s", code, exitBadInput, wrong.stdout.String(), wrong.stderr.String())
	}
	for _, want := range []string{"authentication failed", "m2md key agent --org acme --agent bob"} {
		if !strings.Contains(wrong.stderr.String(), want) {
			t.Errorf("a wrong key: stderr lacks %q: %s", want, wrong.stderr.String())
		}
	}
}
