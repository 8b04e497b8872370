package main

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/m2md/m2md/internal/leakcheck"
	"github.com/m2md/m2md/internal/llama3vocab"
	"github.com/m2md/m2md/internal/testkit"
)

// TestMain runs this test binary as the m2md command when asCLIEnv is set,
// so that tests start real m2md processes (each with its own working
// directory, environment and signals) without building the binary.
// Otherwise it runs the tests and fails the run if goroutines of m2md or
// its network libraries outlive them.
func TestMain(m *testing.M) {
	if os.Getenv(asCLIEnv) == "1" {
		os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(leakcheck.Main(m))
}

func runCLI(t *testing.T, stdin []byte, args ...string) (code int, stdout, stderr []byte) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, bytes.NewReader(stdin), &out, &errb)
	return code, out.Bytes(), errb.Bytes()
}

const key32 = "4242424242424242424242424242424242424242424242424242424242424242"

func TestCompressDecompressRoundTrip(t *testing.T) {
	inputs := []string{"req-chat-1k-03.json", "resp-toolcalls-02.json", "req-chat-tiny-08.json", "stream-chunk-07.json"}
	flagSets := [][]string{
		{"--algo", "auto"},
		{"--algo", "m2m"},
		{"--algo", "m2m", "--binary"},
		{"--algo", "m2m", "--security", "hmac", "--key", key32},
		{"--algo", "m2m", "--binary", "--security", "aead", "--key", key32},
		{"--algo", "tokennative", "--encoding", "o200k"},
		{"--algo", "tokennative", "--encoding", "llama"},
		{"--algo", "brotli"},
		{"--algo", "zlib"},
		{"--algo", "none"},
	}
	for _, flags := range flagSets {
		t.Run(strings.Join(flags, " "), func(t *testing.T) {
			// Only the Llama 3 form needs the vocabulary, so only it may
			// skip without one (and fails under CI).
			if slices.Contains(flags, "llama") {
				t.Setenv(llama3vocab.EnvVar, llama3vocab.ForTest(t))
			}
			for _, name := range inputs {
				in := testkit.CorpusFile(t, name)
				code, wire, stderr := runCLI(t, in, append([]string{"compress"}, flags...)...)
				if code != 0 {
					t.Fatalf("%s compress %v: exit %d: %s", name, flags, code, stderr)
				}
				dargs := []string{"decompress", "--key", key32}
				// A trailing newline, as `echo` or a shell pipe through an
				// editor would add, is tolerated on text forms.
				if !slices.Contains(flags, "--binary") && bytes.HasPrefix(wire, []byte("#")) {
					wire = append(wire, '\n')
				}
				code, got, stderr := runCLI(t, wire, dargs...)
				if code != 0 || !bytes.Equal(got, in) {
					t.Fatalf("%s decompress after %v: exit %d, equal=%v: %s", name, flags, code, bytes.Equal(got, in), stderr)
				}
			}
		})
	}
}

func TestDecompressBinaryTokenNative(t *testing.T) {
	in := testkit.CorpusFile(t, "req-chat-1k-05.json")
	_, wire, _ := runCLI(t, in, "compress", "--algo", "tokennative", "--binary", "--encoding", "o200k")
	if code, got, stderr := runCLI(t, wire, "decompress", "--algo", "tokennative", "--encoding", "o200k"); code != 0 || !bytes.Equal(got, in) {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if code, _, _ := runCLI(t, wire, "decompress", "--algo", "tokennative", "--encoding", "cl100k"); code != exitBadInput {
		t.Fatalf("encoding mismatch: exit %d, want 1", code)
	}
}

func TestExitCodes(t *testing.T) {
	tests := []struct {
		name  string
		stdin string
		args  []string
		code  int
	}{
		{"no command", "", nil, exitUsage},
		{"help", "", []string{"--help"}, exitOK},
		{"unknown command", "", []string{"frobnicate"}, exitUsage},
		{"unknown flag", "", []string{"compress", "--nope"}, exitUsage},
		{"bad algo", "{}", []string{"compress", "--algo", "gzip"}, exitUsage},
		{"security without key", "{}", []string{"compress", "--algo", "m2m", "--security", "hmac"}, exitUsage},
		{"bad key hex", "{}", []string{"compress", "--algo", "m2m", "--security", "hmac", "--key", "zz"}, exitUsage},
		{"m2m of non-JSON", "not json at all", []string{"compress", "--algo", "m2m"}, exitBadInput},
		{"malformed frame", "#M2M|1|AAAA", []string{"decompress"}, exitBadInput},
		{"malformed TK", "#TK|Q|AAAA", []string{"decompress"}, exitBadInput},
		{"protected without key", "", []string{"decompress"}, exitBadInput},
		{"inspect garbage frame", "#M2M|1|!!", []string{"inspect"}, exitBadInput},
		{"compress help", "", []string{"compress", "-h"}, exitOK},
		{"serve bad security", "", []string{"serve", "--min-security", "max"}, exitUsage},
		{"serve bad cluster inbox", "", []string{"serve", "--cluster-listen", "127.0.0.1:0", "--cluster-inbox", "-1"}, exitUsage},
		{"serve bad cluster inbox bytes", "", []string{"serve", "--cluster-listen", "127.0.0.1:0", "--cluster-inbox-bytes", "lots"}, exitUsage},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stdin := []byte(tc.stdin)
			if tc.name == "protected without key" {
				_, stdin, _ = runCLI(t, testkit.CorpusFile(t, "req-chat-1k-01.json"), "compress", "--algo", "m2m", "--security", "hmac", "--key", key32)
			}
			code, _, stderr := runCLI(t, stdin, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d (stderr %s)", code, tc.code, stderr)
			}
			if tc.name == "serve bad cluster inbox" && !bytes.Contains(stderr, []byte("--cluster-inbox -1: want 1 to 1048576 messages")) {
				t.Fatalf("stderr %s: does not name the flag and its range", stderr)
			}
			if tc.name == "serve bad cluster inbox bytes" && !bytes.Contains(stderr, []byte("cluster-inbox-bytes")) {
				t.Fatalf("stderr %s: does not name the flag", stderr)
			}
			if code == exitBadInput && bytes.Count(bytes.TrimSpace(stderr), []byte("\n")) != 0 {
				t.Fatalf("bad input reason is not one line: %q", stderr)
			}
		})
	}
}

// TestInspectSpecVectorA reads the wire reference's example A (§3.13)
// through inspect, with and without HMAC protection (§4.2 vector), which
// needs no key.
func TestInspectSpecVectorA(t *testing.T) {
	for _, wire := range []string{
		"#M2M|1|IgABAAAAAAAAAAAAAAAAAAAAAAAGZ3B0LTRvAQECCtejOz4AAABuYFWkeyJtb2RlbCI6ImdwdC00byIsIm1lc3NhZ2VzIjpbeyJyb2xlIjoidXNlciIsImNvbnRlbnQiOiJIaSJ9XX0=",
		"#M2M|1|IgABAQAAAAAAAAAAAAAAAAAAAAAGZ3B0LTRvAQECCtejOz4AAABuYFWkeyJtb2RlbCI6ImdwdC00byIsIm1lc3NhZ2VzIjpbeyJyb2xlIjoidXNlciIsImNvbnRlbnQiOiJIaSJ9XX32hBjyzhkGGaLEzPY18OnpwGUaO7vGYnA32mMOFrxmcg==",
	} {
		code, out, stderr := runCLI(t, []byte(wire), "inspect")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		var h headerJSON
		if err := json.Unmarshal(out, &h); err != nil {
			t.Fatal(err)
		}
		if h.Schema != "request" || h.Model != "gpt-4o" || *h.MsgCount != 1 || len(h.Roles) != 1 || h.Roles[0] != "user" ||
			*h.ContentHint != 2 || h.CRC32 != "a455606e" || *h.PayloadLen != 62 || h.Compressed || h.HeaderLen != 34 {
			t.Fatalf("inspect: %+v", h)
		}
		if *h.EstCost != 0.005 {
			t.Fatalf("cost %v", *h.EstCost)
		}
	}
}
