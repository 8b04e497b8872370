package main

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/m2md/m2md/security"
)

// TestCLIKey: 'm2md key org' makes a secrets line the daemon reads,
// 'm2md key agent' derives with the security package's AgentKey, and
// neither overwrites what exists.
func TestCLIKey(t *testing.T) {
	dir := t.TempDir()
	orgs := filepath.Join(dir, "conf", "orgs")
	cliCase{name: "org", args: []string{"key", "org", "--org", "acme", "--out", orgs}, stderr: []string{"added org acme"}}.check(t)
	cliCase{name: "second org", args: []string{"key", "org", "--org", "globex", "--out", orgs}}.check(t)
	cliCase{name: "org again", args: []string{"key", "org", "--org", "acme", "--out", orgs}, code: exitBadInput, stderr: []string{"already holds a secret for org acme"}}.check(t)
	secrets, err := readOrgSecrets(orgs)
	if err != nil || len(secrets["acme"]) != orgSecretLen || len(secrets["globex"]) != orgSecretLen {
		t.Fatalf("readOrgSecrets: %v, %d orgs", err, len(secrets))
	}
	for path, want := range map[string]os.FileMode{orgs: 0o600, filepath.Dir(orgs): 0o700} {
		if info, err := os.Stat(path); err != nil || info.Mode().Perm() != want {
			t.Errorf("%s: %v, mode %v, want %04o", path, err, info.Mode(), want)
		}
	}

	code, out, stderr := runCLI(t, nil, "key", "agent", "--org", "acme", "--agent", "bob", "--org-secrets-file", orgs)
	k, err := security.AgentKey(secrets["acme"], "acme", "bob")
	if err != nil {
		t.Fatal(err)
	}
	if want := hex.EncodeToString(k[:]) + "\n"; code != exitOK || string(out) != want {
		t.Fatalf("key agent: exit %d, %q, want %q: %s", code, out, want, stderr)
	}

	keyFile := filepath.Join(dir, "agents", "bob.key")
	for _, tc := range []cliCase{
		{name: "agent to file", args: []string{"key", "agent", "--org", "acme", "--agent", "bob", "--org-secrets-file", orgs, "--out", keyFile}, noStdout: true, stderr: []string{"wrote the key of agent bob"}},
		{name: "never overwritten", args: []string{"key", "agent", "--org", "acme", "--agent", "bob", "--org-secrets-file", orgs, "--out", keyFile}, code: exitBadInput, stderr: []string{"exists: remove it first"}},
		{name: "unknown org", args: []string{"key", "agent", "--org", "initech", "--agent", "bob", "--org-secrets-file", orgs}, code: exitBadInput, stderr: []string{"no secret for org initech"}},
		{name: "no agent", args: []string{"key", "agent", "--org", "acme", "--org-secrets-file", orgs}, code: exitUsage, stderr: []string{"--agent is required"}},
		{name: "no secrets file", args: []string{"key", "agent", "--org", "acme", "--agent", "bob"}, code: exitUsage, stderr: []string{"--org-secrets-file is required", "m2md key org --org acme"}},
		{name: "bad agent id", args: []string{"key", "agent", "--org", "acme", "--agent", "b/ob", "--org-secrets-file", orgs}, code: exitUsage, stderr: []string{"--agent b/ob"}},
		{name: "bad org id", args: []string{"key", "org", "--org", "ac me"}, code: exitUsage, stderr: []string{"--org \"ac me\""}},
		{name: "no kind", args: []string{"key"}, code: exitUsage, stderr: []string{"org or agent"}},
	} {
		t.Run(tc.name, tc.check)
	}
	if info, err := os.Stat(keyFile); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("%s: %v, mode %v, want 0600", keyFile, err, info.Mode())
	}
	b, _ := os.ReadFile(keyFile)
	if strings.TrimSpace(string(b)) != hex.EncodeToString(k[:]) {
		t.Errorf("key file holds %q", b)
	}
}

// TestCLIAgentAuthFlags: the agent commands' authentication flags are
// checked before anything is dialled, and name what to change.
func TestCLIAgentAuthFlags(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "a.key")
	if err := os.WriteFile(key, []byte(strings.Repeat("ab", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(dir, "open.key")
	if err := os.WriteFile(open, []byte(strings.Repeat("ab", 32)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(dir, "short.key")
	if err := os.WriteFile(short, []byte("abcd\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(agentKeyEnvVar, "")
	url := []string{"--url", "ws://127.0.0.1:9/m2m"}
	for _, cmd := range [][]string{{"demo", "provider"}, {"demo", "requester"}, {"upstream", "--models", "m"}} {
		for _, tc := range []cliCase{
			{name: "org without agent", args: []string{"--org", "acme", "--agent-key-file", key}, code: exitUsage, stderr: []string{"--org acme needs --agent"}},
			{name: "org without key", args: []string{"--org", "acme", "--agent", "a"}, code: exitUsage, stderr: []string{"--agent-key-file FILE or $M2MD_AGENT_KEY", "m2md key agent"}},
			{name: "key without org", args: []string{"--agent-key-file", key}, code: exitUsage, stderr: []string{"--agent-key-file needs --org"}},
			{name: "key readable by others", args: []string{"--org", "acme", "--agent", "a", "--agent-key-file", open}, code: exitBadInput, stderr: []string{"chmod 600"}},
			{name: "short key", args: []string{"--org", "acme", "--agent", "a", "--agent-key-file", short}, code: exitUsage, stderr: []string{"64 hex digits"}},
		} {
			tc.name = strings.Join(cmd[:2], " ") + ": " + tc.name
			tc.args = append(append(append([]string{}, cmd...), url...), tc.args...)
			t.Run(tc.name, tc.check)
		}
	}
}
