package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/internal/testkit"
)

// cliCase is one invocation and what a user must see: the exit code, and
// text that stdout and stderr must (or must not) contain.
type cliCase struct {
	name      string
	stdin     string
	args      []string
	code      int
	stdout    []string // substrings stdout must contain
	stderr    []string // substrings stderr must contain
	noStdout  bool     // stdout must be empty
	noStderr  bool     // stderr must be empty
	notStderr []string // substrings stderr must not contain
}

func (tc cliCase) check(t *testing.T) {
	t.Helper()
	code, stdout, stderr := runCLI(t, []byte(tc.stdin), tc.args...)
	if code != tc.code {
		t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, stdout, stderr)
	}
	for _, s := range tc.stdout {
		if !bytes.Contains(stdout, []byte(s)) {
			t.Errorf("stdout lacks %q:\n%s", s, stdout)
		}
	}
	for _, s := range tc.stderr {
		if !bytes.Contains(stderr, []byte(s)) {
			t.Errorf("stderr lacks %q:\n%s", s, stderr)
		}
	}
	for _, s := range tc.notStderr {
		if bytes.Contains(stderr, []byte(s)) {
			t.Errorf("stderr has %q:\n%s", s, stderr)
		}
	}
	if tc.noStdout && len(stdout) > 0 {
		t.Errorf("stdout not empty: %q", stdout)
	}
	if tc.noStderr && len(stderr) > 0 {
		t.Errorf("stderr not empty: %q", stderr)
	}
	if code != exitOK && bytes.Count(bytes.TrimSpace(stderr), []byte("\n")) != 0 && !bytes.Contains(stderr, []byte("Usage:")) {
		t.Errorf("the reason is not one line: %q", stderr)
	}
}

const (
	// llmJSON is an LLM request between 100 B and 1 KB, so auto alone picks m2m.
	llmJSON = `{"model":"gpt-4o","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Name three prime numbers, please."}]}`
	// lossyJSON has what t1 changes: a null, a rounded number.
	lossyJSON = `{"model":"gpt-4o","messages":[{"role":"user","content":"Hi","name":null}],"temperature":1.0005}`
)

func TestCLIHelpAndVersion(t *testing.T) {
	for _, tc := range []cliCase{
		{name: "no command: usage on stderr", code: exitUsage, noStdout: true, stderr: []string{"Usage: m2md <command>"}},
		{name: "--help on stdout", args: []string{"--help"}, stdout: []string{"Usage: m2md <command>", "version"}, noStderr: true},
		{name: "help compress", args: []string{"help", "compress"}, stdout: []string{"Usage: m2md compress", "--algo form"}, noStderr: true},
		{name: "compress --help", args: []string{"compress", "--help"}, stdout: []string{"--security mode", "--key hex", "t1 (legacy) may rename keys"}, noStderr: true},
		{name: "decompress -h", args: []string{"decompress", "-h"}, stdout: []string{"--strict"}, noStderr: true},
		{name: "inspect --help", args: []string{"inspect", "--help"}, stdout: []string{"Usage: m2md inspect"}, noStderr: true},
		{name: "serve --help", args: []string{"serve", "--help"}, stdout: []string{"--max-payload size", "(default 16MiB)", "--config file", "--quic-addr address"}, noStderr: true},
		{name: "bench --help", args: []string{"bench", "--help"}, stdout: []string{"Usage: m2md bench", "in-process unless --url"}, noStderr: true},
		{name: "bench load --help", args: []string{"bench", "load", "--help"}, stdout: []string{"--rate n", "--url URL", "--algo form"}, noStderr: true},
		{name: "demo --help", args: []string{"demo", "--help"}, stdout: []string{"Usage: m2md demo", "provider", "requester"}, noStderr: true},
		{name: "demo requester --help", args: []string{"demo", "requester", "--help"}, stdout: []string{"--agent id", "after the arrow"}, noStderr: true},
		{name: "demo without role", args: []string{"demo"}, code: exitUsage, stderr: []string{"provider or requester"}},
		{name: "version", args: []string{"version"}, stdout: []string{"m2md ", "commit ", runtime.Version()}, noStderr: true},
		{name: "--version", args: []string{"--version"}, stdout: []string{"m2md ", runtime.Version()}, noStderr: true},
	} {
		t.Run(tc.name, tc.check)
	}
}

// TestCLIHelpReadable: no placeholder is a Go type name or a word that
// does not stand for the value, and flags print as --name.
func TestCLIHelpReadable(t *testing.T) {
	for _, args := range [][]string{
		{"compress"}, {"decompress"}, {"inspect"}, {"serve"}, {"bench", "load"}, {"bench", "codec"}, {"bench", "table"},
		{"demo", "provider"}, {"demo", "requester"}, {"version"}, {"upstream"}, {"key", "org"}, {"key", "agent"},
		{"cert", "ca"}, {"cert", "node"}, {"cert", "fingerprint"},
	} {
		code, out, _ := runCLI(t, nil, append(args, "--help")...)
		if code != exitOK {
			t.Fatalf("%v --help: exit %d", args, code)
		}
		for _, bad := range []string{" string\n", " int\n", " value\n", " float\n", "-rate second", "-config flag", "\n  -algorithm", "\n  -target"} {
			if bytes.Contains(out, []byte(bad)) {
				t.Errorf("%v --help shows %q:\n%s", args, bad, out)
			}
		}
		if singleDash.Match(out) {
			t.Errorf("%v --help lists a flag with a single dash:\n%s", args, out)
		}
	}
}

var singleDash = regexp.MustCompile(`\n  -[a-z0-9][a-z0-9-]`)

func TestCLICompressChoices(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "frame.key")
	if err := os.WriteFile(keyFile, []byte(key32+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []cliCase{
		// auto picks a form that carries what was asked for, whatever the size
		{name: "auto aead tiny", stdin: `{"model":"gpt-4o","messages":[]}`, args: []string{"compress", "--security", "aead", "--key-file", keyFile}, stdout: []string{"#M2M|1|"}, noStderr: true},
		{name: "auto hmac large", stdin: string(mustRead(t, "req-chat-4k-03.json")), args: []string{"compress", "--security", "hmac", "--key-file", keyFile}, stdout: []string{"#M2M|1|"}, noStderr: true},
		// --key still works, with a warning: the key shows in ps and the
		// shell history (security review finding 9)
		{name: "key on the command line", stdin: llmJSON, args: []string{"compress", "--security", "hmac", "--key", key32}, stdout: []string{"#M2M|1|"}, stderr: []string{"warning: --key shows the key", "--key-file", "$M2MD_KEY"}},
		{name: "key from the environment", stdin: llmJSON, args: []string{"compress", "--security", "aead"}, stdout: []string{"#M2M|1|"}, noStderr: true},
		{name: "key file and flag", stdin: llmJSON, args: []string{"compress", "--security", "aead", "--key", key32, "--key-file", keyFile}, code: exitUsage, stderr: []string{"--key-file or --key, not both"}},
		{name: "key file missing", stdin: llmJSON, args: []string{"compress", "--security", "aead", "--key-file", keyFile + ".absent"}, code: exitUsage, stderr: []string{"--key-file"}},
		// The binary shape of text that is not JSON could not be told
		// from plain input by decompress: refused, with the way out.
		{name: "binary of text", stdin: "plain text, not JSON", args: []string{"compress", "--binary"}, code: exitBadInput, noStdout: true, stderr: []string{"drop --binary", "--algo tokennative --binary"}},
		{name: "no key at all", stdin: llmJSON, args: []string{"compress", "--security", "aead"}, code: exitUsage, stderr: []string{"needs a key: --key-file FILE or $M2MD_KEY"}, notStderr: []string{"or --key"}},
		{name: "auto binary tiny", stdin: `{"model":"gpt-4o","messages":[]}`, args: []string{"compress", "--binary", "-v"}, stderr: []string{"algorithm m2m (binary shape of JSON"}},
		{name: "explicit brotli with security", stdin: llmJSON, args: []string{"compress", "--algo", "brotli", "--security", "aead", "--key", key32}, code: exitUsage, stderr: []string{"M2M v1 frames only", "--algo m2m"}},
		{name: "explicit zlib binary", stdin: llmJSON, args: []string{"compress", "--algo", "zlib", "--binary"}, code: exitUsage, stderr: []string{"--binary exists for --algo m2m and tokennative"}},
		// --key alone protects nothing
		{name: "key without security", stdin: llmJSON, args: []string{"compress", "--key", key32}, code: exitUsage, noStdout: true, stderr: []string{"--key protects nothing without --security"}},
		{name: "key file without security", stdin: llmJSON, args: []string{"compress", "--key-file", keyFile}, code: exitUsage, noStdout: true, stderr: []string{"--key-file protects nothing without --security"}, notStderr: []string{" --key "}},
		// key problems are all usage errors, whatever is wrong with the key
		{name: "short hmac key", stdin: llmJSON, args: []string{"compress", "--security", "hmac", "--key", "4242"}, code: exitUsage, stderr: []string{"at least 16 bytes"}},
		{name: "short aead key", stdin: llmJSON, args: []string{"compress", "--security", "aead", "--key", "4242"}, code: exitUsage, stderr: []string{"at least 32 bytes"}},
		{name: "non-hex key", stdin: llmJSON, args: []string{"compress", "--security", "aead", "--key", "zz"}, code: exitUsage, stderr: []string{"--key must be hex"}},
		// t1 changes documents: refused unless --lossy
		{name: "t1 lossy refused", stdin: lossyJSON, args: []string{"compress", "--algo", "t1"}, code: exitBadInput, noStdout: true, stderr: []string{"--lossy"}},
		{name: "t1 lossy accepted", stdin: lossyJSON, args: []string{"compress", "--algo", "t1", "--lossy"}, stdout: []string{"#T1|"}, noStderr: true},
		// bad input in the user's terms
		{name: "invalid JSON", stdin: `{"model":`, args: []string{"compress", "--algo", "m2m"}, code: exitBadInput, stderr: []string{"stdin is not valid JSON", "at byte"}, notStderr: []string{"jsonscan", "frame:"}},
		{name: "llama without vocabulary", stdin: llmJSON, args: []string{"compress", "--algo", "tokennative", "--encoding", "llama", "--llama3-vocab", ""}, code: exitBadInput, stderr: []string{"--llama3-vocab DIR", "M2MD_LLAMA3_VOCAB", "go mod download -json github.com/ollama/ollama@", "tokenizer.model"}, notStderr: []string{"Config."}},
		{name: "unknown flag", args: []string{"compress", "--nope"}, code: exitUsage, stderr: []string{"--nope", "run 'm2md compress --help'"}, noStdout: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if strings.Contains(tc.name, "llama") {
				t.Setenv("M2MD_LLAMA3_VOCAB", "")
			}
			t.Setenv("M2MD_KEY", "")
			if tc.name == "key from the environment" {
				t.Setenv("M2MD_KEY", key32)
			}
			tc.check(t)
		})
	}
	// What auto wrote for --security decompresses byte for byte.
	_, wire, _ := runCLI(t, []byte(`{"model":"gpt-4o","messages":[]}`), "compress", "--security", "aead", "--key", key32)
	if code, got, stderr := runCLI(t, wire, "decompress", "--key", key32); code != exitOK || string(got) != `{"model":"gpt-4o","messages":[]}` {
		t.Fatalf("round trip: exit %d, %q, %s", code, got, stderr)
	}
}

// TestCLIEmptyStdin: empty stdin is bad input for every command and form.
func TestCLIEmptyStdin(t *testing.T) {
	for _, args := range [][]string{
		{"compress"}, {"compress", "--algo", "m2m"}, {"compress", "--algo", "none"}, {"compress", "--algo", "brotli"},
		{"decompress"}, {"decompress", "--algo", "tokennative"}, {"inspect"},
	} {
		cliCase{name: strings.Join(args, " "), args: args, code: exitBadInput, noStdout: true, stderr: []string{"stdin is empty"}}.check(t)
	}
}

func TestCLIDecompressStrict(t *testing.T) {
	for _, tc := range []cliCase{
		{name: "passthrough", stdin: "garbage", args: []string{"decompress"}, stdout: []string{"garbage"}, noStderr: true},
		{name: "strict refuses", stdin: "garbage", args: []string{"decompress", "--strict"}, code: exitBadInput, noStdout: true, stderr: []string{"no known wire form"}},
		{name: "strict takes a frame", stdin: "#M2M|1|IgABAAAAAAAAAAAAAAAAAAAAAAAGZ3B0LTRvAQECCtejOz4AAABuYFWkeyJtb2RlbCI6ImdwdC00byIsIm1lc3NhZ2VzIjpbeyJyb2xlIjoidXNlciIsImNvbnRlbnQiOiJIaSJ9XX0=", args: []string{"decompress", "--strict"}, stdout: []string{`"gpt-4o"`}, noStderr: true},
		{name: "protected without key", stdin: string(mustCompress(t, llmJSON, "--security", "hmac", "--key", key32)), args: []string{"decompress"}, code: exitBadInput, stderr: []string{"pass its key with --key-file FILE or $M2MD_KEY"}, notStderr: []string{"--key "}},
	} {
		t.Run(tc.name, tc.check)
	}
}

func TestCLIServeUsage(t *testing.T) {
	for _, tc := range []cliCase{
		{name: "session timeout out of range", args: []string{"serve", "--session-timeout", "10s", "--quic-addr", "-", "--ws-addr", "-", "--admin-addr", "-", "--cert-dir", t.TempDir()}, code: exitUsage, stderr: []string{"--session-timeout 10s is outside 1m..1h"}, notStderr: []string{"negotiate", "Config"}},
		{name: "ping interval above the session timeout", args: []string{"serve", "--ping-interval", "2h", "--quic-addr", "-", "--ws-addr", "-", "--admin-addr", "-", "--cert-dir", t.TempDir()}, code: exitUsage, stderr: []string{"--ping-interval 2h is outside 1s..5m (--session-timeout)"}, notStderr: []string{"negotiate", "Config"}},
		{name: "pong timeout below 1s", args: []string{"serve", "--pong-timeout", "1ms", "--quic-addr", "-", "--ws-addr", "-", "--admin-addr", "-", "--cert-dir", t.TempDir()}, code: exitUsage, stderr: []string{"--pong-timeout 1ms is outside 1s..1m (--ping-interval)"}, notStderr: []string{"negotiate", "Config"}},
		{name: "max payload too big", args: []string{"serve", "--max-payload", "17MiB"}, code: exitUsage, stderr: []string{"--max-payload", "16MiB"}},
		{name: "bytes per second with a unit", args: []string{"serve", "--bytes-per-second", "10MB", "--session-timeout", "1s", "--quic-addr", "-", "--ws-addr", "-", "--admin-addr", "-", "--cert-dir", t.TempDir()}, code: exitUsage, stderr: []string{"--session-timeout"}, notStderr: []string{"bytes-per-second"}},
		{name: "max payload garbage", args: []string{"serve", "--max-payload", "lots"}, code: exitUsage, stderr: []string{"like 65536, 64KiB or 16MiB"}},
		{name: "bad min security", args: []string{"serve", "--min-security", "max"}, code: exitUsage, stderr: []string{"--min-security must be none, hmac or aead"}},
		{name: "port without host", args: []string{"serve", "--quic-addr", "4433", "--cert-dir", t.TempDir()}, code: exitUsage, stderr: []string{`--quic-addr "4433": want host:port, such as 127.0.0.1:4433`}},
		{name: "admin address without port", args: []string{"serve", "--admin-addr", "localhost", "--cert-dir", t.TempDir()}, code: exitUsage, stderr: []string{`--admin-addr "localhost": want host:port`}},
		{name: "openai port without host", args: []string{"serve", "--openai-addr", "8000", "--cert-dir", t.TempDir()}, code: exitUsage, stderr: []string{`--openai-addr "8000": want host:port, such as 127.0.0.1:8000`}},
		{name: "unknown flag", args: []string{"serve", "--nope"}, code: exitUsage, stderr: []string{"--nope", "run 'm2md serve --help'"}, notStderr: []string{"error parsing commandline"}},
	} {
		t.Run(tc.name, tc.check)
	}
}

func TestByteSizeFlag(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		ok   bool
	}{
		{"65536", 65536, true}, {"64KiB", 64 << 10, true}, {"1MiB", 1 << 20, true}, {"16MiB", 16 << 20, true},
		{"1MB", 1_000_000, true}, {"1 MiB", 1 << 20, true}, {"17MiB", 0, false}, {"-1", 0, false}, {"lots", 0, false},
	} {
		var n int
		b := &byteSize{p: &n, max: 16 << 20}
		err := b.Set(tc.in)
		if (err == nil) != tc.ok || (tc.ok && n != tc.want) {
			t.Errorf("Set(%q) = %d, %v; want %d, ok %v", tc.in, n, err, tc.want, tc.ok)
		}
	}
	var n int
	if err := (&byteSize{p: &n, unlimited: true}).Set("-1"); err != nil || n != -1 {
		t.Errorf("-1 for unlimited: %d, %v", n, err)
	}
	if err := (&byteSize{p: &n}).Set("-1"); err == nil {
		t.Error("-1 taken by a size that has no unlimited")
	}
	if s := formatBytes(16 << 20); s != "16MiB" {
		t.Errorf("formatBytes(16MiB) = %q", s)
	}
}

func TestCLIDemoRequesterFailures(t *testing.T) {
	d := startTestDaemon(t, nil)
	url := "ws://" + d.WSAddr().String() + "/m2m"
	dir := t.TempDir()
	for _, name := range []string{"req-chat-tiny-01.json", "req-chat-tiny-02.json"} {
		if err := os.WriteFile(filepath.Join(dir, name), mustRead(t, name), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// No provider: every request fails, the summary says so, exit 1.
	cliCase{name: "no provider", args: []string{"demo", "requester", "--url", url, "--security", "none", "--corpus", dir, "--agent", "tester"},
		code: exitBadInput, stdout: []string{"requester tester connected", "0 of 2 requests answered, 2 failed", "answered by"},
		stderr: []string{"all 2 requests failed", "demo provider"}}.check(t)
	// A wrong WebSocket path gets a hint at /m2m.
	cliCase{name: "wrong path", args: []string{"demo", "requester", "--url", "ws://" + d.WSAddr().String() + "/", "--corpus", dir},
		code: exitBadInput, stderr: []string{"/m2m by default"}}.check(t)
}

// TestCLIBenchLoadMostlyFailed: a run where the daemon refuses most
// requests exits 1 and names the limit to change.
//
// The daemon answers ten refusals with rate_limited (a second's worth of
// error replies) and closes the session at the next, which ends the at
// most --concurrency requests then in flight: 10 rate_limited against at
// most 4 session_closed, if all are measured. The warm-up is 1ns, not
// 0s (which means the default 2 s): even 1 ms held up to half of the
// rate_limited errors on a fast run, and let the close's failures
// outnumber those measured.
func TestCLIBenchLoadMostlyFailed(t *testing.T) {
	d := startTestDaemon(t, func(c *daemon.Config) { c.MessagesPerMinute = 2 })
	url := "ws://" + d.WSAddr().String() + "/m2m"
	cliCase{name: "rate limited", args: []string{"bench", "load", "--url", url, "--duration", "1s", "--warmup", "1ns", "--connections", "1", "--providers", "1", "--concurrency", "4"},
		code: exitBadInput, stdout: []string{"round trips/s"}, stderr: []string{"m2md bench: most requests failed", "rate_limited", "--messages-per-minute"}}.check(t)
}

// bench load's settings in conflict are refused in the words of their
// flags (the library names its LoadConfig fields).
func TestCLIBenchLoadConfigErrors(t *testing.T) {
	cliCase{name: "compare", args: []string{"bench", "load", "--compare", "redis"}, code: exitBadInput, stderr: []string{`--compare must be nats or single-node, not "redis"`}}.check(t)
	cliCase{name: "nats url", args: []string{"bench", "load", "--nats-url", "nats://127.0.0.1:4222"}, code: exitBadInput, stderr: []string{"--nats-url is the server for --compare nats; set --compare to nats"}}.check(t)
	cliCase{name: "provider target", args: []string{"bench", "load", "--provider-target", "ws://127.0.0.1:2/m2m"}, code: exitBadInput, stderr: []string{"--provider-target needs --url"}}.check(t)
}

func TestCLIBenchChecksOutputsFirst(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no", "such", "folder", "out.json")
	start := time.Now()
	cliCase{name: "json", args: []string{"bench", "load", "--duration", "5s", "--json", missing}, code: exitBadInput, noStdout: true, stderr: []string{"--json", "cannot be written"}}.check(t)
	cliCase{name: "plot dir", args: []string{"bench", "codec", "--plot", t.TempDir() + "/"}, code: exitUsage, stderr: []string{".svg or .png"}}.check(t)
	cliCase{name: "plot", args: []string{"bench", "load", "--duration", "5s", "--plot", strings.TrimSuffix(missing, ".json") + ".png"}, code: exitBadInput, stderr: []string{"--plot", "cannot be written"}}.check(t)
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("the checks took %v: the run started before them", took)
	}
}

// TestCLIBenchQUICTargetPinsDevCert: against the development daemon of
// this user, a quic:// --url needs no --pin, as for the demo.
func TestCLIBenchQUICTargetPinsDevCert(t *testing.T) {
	userDirs(t)
	d := startTestDaemon(t, func(c *daemon.Config) { c.QUICAddr, c.CertDir = "127.0.0.1:0", "" })
	// --warmup 0s is none, not the library's default of 2 s.
	cliCase{name: "pinned", args: []string{"bench", "load", "--url", "quic://" + d.QUICAddr().String(), "--duration", "300ms", "--warmup", "0s", "--connections", "1", "--providers", "1", "--concurrency", "2"},
		stdout: []string{"round trips/s", "measured after 0s warm-up"}}.check(t)
}

func TestCLIBenchQUICTargetNeedsCertificate(t *testing.T) {
	dir := userDirs(t) // no development certificate there
	cliCase{name: "no pin", args: []string{"bench", "load", "--url", "quic://127.0.0.1:4433", "--duration", "1s"},
		code: exitUsage, stderr: []string{"--pin", filepath.Join(dir, "m2md", "certs")}}.check(t)
}

func startTestDaemon(t *testing.T, mutate func(*daemon.Config)) *daemon.Server {
	t.Helper()
	cfg := daemon.Config{QUICAddr: "-", WSAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", CertDir: t.TempDir()}
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err := daemon.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Error("daemon did not stop")
		}
	})
	select {
	case <-srv.Ready():
	case err := <-done:
		t.Fatalf("daemon: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("daemon did not start")
	}
	return srv
}

func mustRead(t *testing.T, name string) []byte { return testkit.CorpusFile(t, name) }

func mustCompress(t *testing.T, in string, args ...string) []byte {
	t.Helper()
	code, out, stderr := runCLI(t, []byte(in), append([]string{"compress"}, args...)...)
	if code != exitOK {
		t.Fatalf("compress %v: exit %d: %s", args, code, stderr)
	}
	return out
}

func TestCLIOpenAIUsage(t *testing.T) {
	dir := t.TempDir()
	secrets := filepath.Join(dir, "secrets")
	if err := os.WriteFile(secrets, []byte("acme 000102030405060708090a0b0c0d0e0f\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	off := []string{"--quic-addr", "127.0.0.1:0", "--ws-addr", "-", "--admin-addr", "-", "--cert-dir", dir, "--openai-addr", "127.0.0.1:0"}
	for _, tc := range []cliCase{
		{name: "upstream --help", args: []string{"upstream", "--help"}, stdout: []string{"--base-url URL", "--api-key-env variable", "--concurrency n", "--conversation-bases size", "(default 64MiB)"}, noStderr: true},
		{name: "upstream bad conversation bases", args: []string{"upstream", "--conversation-bases", "lots"}, code: exitUsage, stderr: []string{"--conversation-bases", "want a size like"}},
		{name: "upstream concurrency 0", args: []string{"upstream", "--concurrency", "0"}, code: exitUsage, stderr: []string{"--concurrency must be at least 1"}},
		{name: "upstream bad base URL", args: []string{"upstream", "--base-url", "ftp://x"}, code: exitUsage, stderr: []string{"--base-url", "http(s)://"}},
		{name: "upstream empty key variable", args: []string{"upstream", "--api-key-env", "M2MD_TEST_NO_SUCH_VARIABLE"}, code: exitUsage, stderr: []string{"M2MD_TEST_NO_SUCH_VARIABLE", "empty or not set"}},
		{name: "serve --help", args: []string{"serve", "--help"}, stdout: []string{"--openai-addr address", "--openai-keys-file file", "--disable-features features", "--openai-conversation-history size", "(default 32MiB)"}, noStderr: true},
		{name: "keys required with org secrets", args: append([]string{"serve", "--org-secrets-file", secrets}, off...), code: exitUsage, stderr: []string{"--openai-keys-file is required with --org-secrets-file"}},
		{name: "unknown feature", args: []string{"serve", "--disable-features", "cancle", "--quic-addr", "-", "--ws-addr", "-", "--admin-addr", "-", "--cert-dir", dir}, code: exitUsage, stderr: []string{"cancle"}},
	} {
		t.Run(tc.name, tc.check)
	}
}

// userDirs points the user's home and configuration folders of this test
// (and of the processes it starts) at a new empty folder, which it returns
// as the configuration folder.
func userDirs(t *testing.T) string {
	t.Helper()
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, "config"))
	return filepath.Join(home, "config")
}
