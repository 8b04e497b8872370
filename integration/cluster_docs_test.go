package integration

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/m2md/m2md/internal/daemontest"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// docBlock is the fenced block that follows the marker
// "<!-- test: name" in docs/operations.md.
func docBlock(t *testing.T, doc, name string) string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, "<!-- test: "+name+" ")
	if !ok {
		t.Fatalf("docs/operations.md has no block marked %q", name)
	}
	_, rest, _ = strings.Cut(rest, "```")
	_, rest, _ = strings.Cut(rest, "\n") // the fence's language
	block, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatalf("block %q is not closed", name)
	}
	return block
}

// docCommands are the commands of a shell block: comments dropped,
// continuation lines joined, split into words (the block has no quoting).
func docCommands(t *testing.T, block string) [][]string {
	t.Helper()
	var cmds [][]string
	joined := strings.ReplaceAll(block, "\\\n", " ")
	for _, line := range strings.Split(joined, "\n") {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.ContainsAny(line, `"'$`) {
			t.Fatalf("command %q quotes or expands: the test runs its words as they are", line)
		}
		cmds = append(cmds, strings.Fields(line))
	}
	return cmds
}

// docHosts stands the example's machines in on loopback: each
// 10.0.0.N:port gets a port of its own on 127.0.0.1, a bare 10.0.0.N is
// 127.0.0.1, and /etc/m2md is etc.
type docHosts struct {
	etc   string
	ports map[string]string
}

var exampleAddr = regexp.MustCompile(`10\.0\.0\.[0-9]+(:[0-9]+)?`)

func (h *docHosts) local(t *testing.T, s string) string {
	s = strings.ReplaceAll(s, "/etc/m2md", h.etc)
	return exampleAddr.ReplaceAllStringFunc(s, func(addr string) string {
		if !strings.Contains(addr, ":") {
			return "127.0.0.1"
		}
		if p, ok := h.ports[addr]; ok {
			return p
		}
		h.ports[addr] = freeAddr(t)
		return h.ports[addr]
	})
}

// freeAddr is a 127.0.0.1 port free for TCP and UDP (the example's
// --quic-addr is UDP) when asked.
func freeAddr(t *testing.T) string {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		if u, err := net.ListenPacket("udp", addr); err == nil {
			u.Close()
			return addr
		}
	}
	t.Fatal("no free port on loopback")
	return ""
}

// buildM2MD builds the m2md binary into dir.
func buildM2MD(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "m2md")
	out, err := exec.Command("go", "build", "-o", bin, "../cmd/m2md").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestClusterDocumentedSetup runs docs/operations.md's three-node setup as
// written there: its m2md cert commands and secrets (the shell block), the
// daemon of host-a from the documented config file and those of host-b and
// host-c from the documented commands, on loopback (each 10.0.0.N address
// a loopback port; the agent-facing ws:// and admin ports, which the
// example leaves at their loopback defaults, moved apart). Requests cross
// the three nodes. The config file is the host-a command, flag for flag,
// and as written (with its 10.0.0.1) passes the checks beyond loopback,
// which refuse it with its TLS lines taken out or replaced by a password.
func TestClusterDocumentedSetup(t *testing.T) {
	docBytes, err := os.ReadFile(filepath.Join("..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(docBytes)
	tmp := t.TempDir()
	bin := buildM2MD(t, tmp)
	hosts := &docHosts{etc: filepath.Join(tmp, "etc-m2md"), ports: map[string]string{}}
	env := append(os.Environ(), "PATH="+tmp+string(os.PathListSeparator)+os.Getenv("PATH"))

	setup := exec.Command("sh", "-ec", hosts.local(t, docBlock(t, doc, "cluster-setup")))
	setup.Dir, setup.Env = tmp, env
	if out, err := setup.CombinedOutput(); err != nil {
		t.Fatalf("the setup block: %v\n%s", err, out)
	}
	orgs, err := os.ReadFile(filepath.Join(hosts.etc, "orgs"))
	if err != nil {
		t.Fatal(err)
	}
	org, secretHex, _ := strings.Cut(strings.TrimSpace(string(orgs)), " ")
	master, err := hex.DecodeString(secretHex)
	if err != nil || org != "acme" {
		t.Fatalf("orgs file %q: %v", orgs, err)
	}

	serve := docCommands(t, docBlock(t, doc, "cluster-serve"))
	if len(serve) != 3 {
		t.Fatalf("%d serve commands, want 3", len(serve))
	}
	conf := docBlock(t, doc, "cluster-config")
	var confArgs []string
	for _, line := range strings.Split(conf, "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			flag, value, _ := strings.Cut(line, " ")
			confArgs = append(confArgs, "--"+flag, strings.TrimSpace(value))
		}
	}
	if !slices.Equal(flagPairs(serve[0][2:]), flagPairs(confArgs)) {
		t.Fatalf("the config file is not host-a's command:\n%v\n%v", flagPairs(serve[0][2:]), flagPairs(confArgs))
	}

	t.Run("refusals beyond loopback", func(t *testing.T) {
		// As written: past the checks (it then fails to bind 10.0.0.1,
		// which this machine does not have).
		asWritten := strings.ReplaceAll(conf, "/etc/m2md", hosts.etc)
		noCA := regexp.MustCompile(`(?m)^cluster-tls-ca .*$`).ReplaceAllString(asWritten, "")
		noTLS := regexp.MustCompile(`(?m)^cluster-tls-.*$`).ReplaceAllString(asWritten, "")
		pwFile := filepath.Join(tmp, "cluster.pw")
		if err := os.WriteFile(pwFile, []byte("a-long-cluster-password\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		password := noTLS + "\ncluster-user m2md\ncluster-password-file " + pwFile + "\n"
		for _, tc := range []struct {
			name, conf string
			code       int
			want       string
		}{
			{"without --cluster-tls-ca", noCA, 2, "--cluster-tls-ca"},
			{"without TLS", noTLS, 2, "--cluster-tls-cert"},
			{"a password instead of TLS", password, 2, "a password alone"},
		} {
			code, stderr := runServe(t, bin, tmp, tc.conf)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Errorf("%s: exit %d, stderr %q; want exit %d naming %q", tc.name, code, stderr, tc.code, tc.want)
			}
		}
		if code, stderr := runServe(t, bin, tmp, asWritten); code == 2 || strings.Contains(stderr, "insecure") {
			t.Errorf("as written: exit %d, stderr %q: refused by the checks", code, stderr)
		}
	})

	// The loopback ports the example leaves at their defaults, apart.
	var wsAddrs, adminAddrs []string
	for i := range serve {
		var args []string
		if i == 0 {
			confFile := filepath.Join(hosts.etc, "m2md.conf")
			if err := os.WriteFile(confFile, []byte(hosts.local(t, conf)), 0o644); err != nil {
				t.Fatal(err)
			}
			args = []string{"serve", "--config", confFile}
		} else {
			for _, a := range serve[i][1:] {
				args = append(args, hosts.local(t, a))
			}
		}
		wsAddrs, adminAddrs = append(wsAddrs, freeAddr(t)), append(adminAddrs, freeAddr(t))
		args = append(args, "--ws-addr", wsAddrs[i], "--admin-addr", adminAddrs[i], "--openai-addr", freeAddr(t), "--log-format", "json")
		startProcess(t, bin, filepath.Join(tmp, fmt.Sprintf("host-%d", i)), args)
	}
	deadline := time.Now().Add(30 * time.Second)
	for i, a := range adminAddrs {
		for !metricLine(a, "m2md_cluster_nodes 2") || !metricLine(a, `m2md_cluster_links{auth="token"} 1`) {
			if time.Now().After(deadline) {
				m, err := daemontest.FetchMetrics(a)
				t.Fatalf("host %d does not hear the two others (%v):\n%s", i, err, m)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if metricLine(a, `m2md_cluster_links{auth="mtls"} 0`) {
			t.Fatalf("host %d has no mutual-TLS route", i)
		}
	}

	dial := func(i int, id string, models ...string) *rawAgent {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := transport.DialWS(ctx, "ws://"+wsAddrs[i]+"/m2m", nil, transport.Config{})
		if err != nil {
			t.Fatal(err)
		}
		a, err := handshakeRaw(t, nil, conn, negotiate.ClientConfig{AgentID: id, Org: org, AgentKey: agentKey(t, master, org, id), Models: models})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	prov := dial(2, "provider-c", "gpt-4o")
	for i := range 2 {
		// Its remote agents: the provider, and the OpenAI endpoints of
		// the two other nodes (each node's endpoint is an agent).
		for !metricLine(adminAddrs[i], "m2md_cluster_remote_agents 3") {
			if time.Now().After(deadline) {
				t.Fatalf("host %d does not know the provider", i)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for i := range 2 {
		roundTrip(t, dial(i, fmt.Sprintf("requester-%d", i)), prov)
	}
}

// flagPairs is args as sorted "--flag value" pairs.
func flagPairs(args []string) []string {
	var out []string
	for i := 0; i+1 < len(args); i += 2 {
		out = append(out, args[i]+" "+args[i+1])
	}
	slices.Sort(out)
	return out
}

// metricLine reports whether the admin endpoint at addr shows line (false
// while it does not answer).
func metricLine(addr, line string) bool {
	m, err := daemontest.FetchMetrics(addr)
	return err == nil && strings.Contains(m, "\n"+line+"\n")
}

// runServe runs m2md serve with conf as its config file for at most 10 s
// (a daemon past its checks that keeps running is stopped), in a folder
// of its own, and returns its exit code and stderr.
func runServe(t *testing.T, bin, tmp, conf string) (int, string) {
	t.Helper()
	dir, err := os.MkdirTemp(tmp, "serve")
	if err != nil {
		t.Fatal(err)
	}
	confFile := filepath.Join(dir, "m2md.conf")
	if err := os.WriteFile(confFile, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "serve", "--config", confFile, "--ws-addr", "-", "--admin-addr", "-", "--openai-addr", "-")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	if ctx.Err() != nil {
		return -1, stderr.String()
	}
	return cmd.ProcessState.ExitCode(), stderr.String()
}

// startProcess runs bin with args in dir until the test ends, then stops
// it with SIGTERM (as systemd does) and waits for it.
func startProcess(t *testing.T, bin, dir string, args []string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	cmd := exec.Command(bin, args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("%s %v:\n%s", bin, args, logs.String())
		}
	})
}
