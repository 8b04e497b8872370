package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
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

	// The key from the environment instead of a file.
	bobKey, err := os.ReadFile(filepath.Join(home, ".config", "m2md", "agents", "bob.key"))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(agentKeyEnvVar, strings.TrimSpace(string(bobKey)))
	env := startM2MD(t, repo, "demo", "requester", "--org", "acme", "--agent", "bob", "--url", url, "--corpus", smallCorpus(t))
	if code := env.wait(time.Minute); code != 0 {
		t.Fatalf("the key in $%s: exit %d\n%s", agentKeyEnvVar, code, env.stderr.String())
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

// TestREADMEDemoFigures runs README's demo (serve, demo provider, demo
// requester over testdata/corpus, AEAD) and checks what README says of it:
// the totals and extreme ratios in its prose and every line of its sample
// output, but for the latency column and the random part of agent ids.
// The received wire bytes vary with those ids and the answers' timestamps:
// README gives their ratio as "about", checked within 0.03.
func TestREADMEDemoFigures(t *testing.T) {
	userDirs(t)
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, readme, ok := strings.Cut(string(b), "<!-- demo-figures:")
	if !ok {
		t.Fatal("README.md has no demo-figures marker")
	}
	prose, rest, _ := strings.Cut(readme, "```\n")
	sample, _, _ := strings.Cut(rest, "```")

	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	_, url := startServe(t, t.TempDir())
	prov := startM2MD(t, t.TempDir(), "demo", "provider", "--url", url)
	prov.waitOutput(`provider \S+ connected`, 30*time.Second)
	req := startM2MD(t, repo, "demo", "requester", "--url", url)
	if code := req.wait(2 * time.Minute); code != 0 {
		t.Fatalf("requester: exit %d\n%s\n%s", code, req.stdout.String(), req.stderr.String())
	}
	out := req.stdout.String()

	// Every sample line is in the output.
	got := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		got[demoLine(line)] = true
	}
	for _, line := range strings.Split(sample, "\n") {
		if line = strings.TrimSpace(line); line == "" || line == "…" {
			continue
		}
		if !got[demoLine(line)] {
			t.Errorf("README's line\n  %s\nis not in the demo's output:\n%s", line, out)
		}
	}

	// The prose's figures.
	var rows []demoRow
	for _, line := range strings.Split(out, "\n") {
		if r, ok := parseDemoRow(line); ok {
			rows = append(rows, r)
		}
	}
	m := regexp.MustCompile(`sent (\d+) JSON bytes as (\d+) wire bytes \(([\d.]+)x\); received (\d+) JSON bytes as (\d+) wire bytes \(([\d.]+)x\)`).FindStringSubmatch(out)
	if m == nil || len(rows) == 0 {
		t.Fatalf("no totals or rows in the output:\n%s", out)
	}
	lo, hi := rows[0], rows[0]
	for _, r := range rows {
		if r.ratio < lo.ratio {
			lo = r
		}
		if r.ratio > hi.ratio {
			hi = r
		}
	}
	prose = strings.Join(strings.Fields(prose), " ")
	for _, want := range []string{
		fmt.Sprintf("(%d requests, AEAD", len(rows)),
		"sends " + commas(m[1]) + " JSON bytes as " + commas(m[2]) + " bytes on the wire: **" + m[3] + "x**",
		fmt.Sprintf("from %.2fx (a %d-byte request", lo.ratio, lo.json),
		fmt.Sprintf("to %.2fx (a %d KB conversation)", hi.ratio, hi.json/1000/100*100),
	} {
		if !strings.Contains(prose, want) {
			t.Errorf("README's demo prose lacks %q (from this run's output):\n%s", want, prose)
		}
	}
	about := regexp.MustCompile(`about ([\d.]+)x`).FindStringSubmatch(prose)
	received, _ := strconv.ParseFloat(m[6], 64)
	if about == nil {
		t.Errorf("README's demo prose gives no 'about …x' for the answers")
	} else if x, _ := strconv.ParseFloat(about[1], 64); math.Abs(x-received) > 0.03 {
		t.Errorf("README says the answers cost about %sx, this run %sx", about[1], m[6])
	}
}

var (
	randomID  = regexp.MustCompile(`\b(demo-(?:provider|requester))-[0-9a-f]{6}\b`)
	demoRowRe = regexp.MustCompile(`^(req-\S+)\s+(\S+)\s+(\d+)\s+(\d+)\s+([\d.]+)x\s+\S+\s+← (\S+) \((\d+) B\)$`)
	summaryRe = regexp.MustCompile(`^(sent \d+ JSON bytes as \d+ wire bytes \([\d.]+x\); received \d+ JSON bytes) as \d+ wire bytes \([\d.]+x\)$`)
	spacesRe  = regexp.MustCompile(`\s+`)
)

// demoLine is a line of the requester's output without what changes from
// run to run: the latency, the random part of agent ids, the answers' wire
// bytes.
func demoLine(line string) string {
	line = strings.TrimSpace(randomID.ReplaceAllString(line, "$1-ID"))
	if m := demoRowRe.FindStringSubmatch(line); m != nil {
		return strings.Join(append(m[1:6:6], "←", m[6], m[7]), " ")
	}
	if m := summaryRe.FindStringSubmatch(line); m != nil {
		return m[1]
	}
	return spacesRe.ReplaceAllString(line, " ")
}

type demoRow struct {
	json  int
	ratio float64
}

func parseDemoRow(line string) (demoRow, bool) {
	m := demoRowRe.FindStringSubmatch(strings.TrimSpace(line))
	if m == nil {
		return demoRow{}, false
	}
	n, _ := strconv.Atoi(m[3])
	x, _ := strconv.ParseFloat(m[5], 64)
	return demoRow{json: n, ratio: x}, true
}

// commas writes a decimal number with thousands separators, as README does.
func commas(n string) string {
	if len(n) <= 3 {
		return n
	}
	return commas(n[:len(n)-3]) + "," + n[len(n)-3:]
}
