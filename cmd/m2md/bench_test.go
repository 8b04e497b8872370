package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func benchCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(append([]string{"bench"}, args...), strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

// TestBenchLoad runs `m2md bench load` for a second against an in-process
// daemon and the bare relay on each transport, and reads the JSON report as
// a script would.
func TestBenchLoad(t *testing.T) {
	for _, tr := range []string{"quic", "ws"} {
		t.Run(tr, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "load.json")
			code, stdout, stderr := benchCLI(t, "load", "--transport", tr, "--duration", "1s", "--warmup", "200ms",
				"--connections", "2", "--providers", "2", "--concurrency", "8", "--baseline", "--json", out)
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			if !strings.Contains(stdout, "round trips/s") || !strings.Contains(stdout, "bare relay") {
				t.Errorf("no table on stdout:\n%s", stdout)
			}
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			var rep map[string]any
			if err := json.Unmarshal(b, &rep); err != nil {
				t.Fatal(err)
			}
			base, _ := rep["baseline"].(map[string]any)
			for _, m := range []map[string]any{rep, base} {
				for _, f := range []string{"round_trips_per_sec", "p50_us", "p99_us", "p999_us"} {
					if v, ok := m[f].(float64); !ok || v <= 0 {
						t.Errorf("%s = %v", f, m[f])
					}
				}
				if m["errors"] != 0.0 {
					t.Errorf("errors = %v: %v", m["errors"], m["errors_by_reason"])
				}
			}
		})
	}
}

func TestBenchCodec(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"req-chat-tiny-01.json", "resp-chat-01.json"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "corpus", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	csvOut := filepath.Join(t.TempDir(), "codec.csv")
	code, stdout, stderr := benchCLI(t, "codec", "--corpus", dir, "--min-time", "100us", "--csv", csvOut)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "m2m-binary") || !strings.Contains(stdout, "brotli+base64") {
		t.Errorf("table:\n%s", stdout)
	}
	b, err := os.ReadFile(csvOut)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(string(b), "\n"); lines != 1+2*10 {
		t.Errorf("CSV has %d lines, want a header and 20 rows", lines)
	}
}

func TestBenchUsage(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"nope"},
		{"load", "--security", "rot13"},
		{"load", "--payload", "3KB"},
		{"load", "--algorithm", "zip"},
		{"load", "--plot", "chart.gif"},
		{"load", "extra"},
		{"codec", "--min-time", "0s"},
	} {
		if code, _, stderr := benchCLI(t, args...); code != exitUsage {
			t.Errorf("bench %v: exit %d, want %d (%s)", args, code, exitUsage, stderr)
		}
	}
	if code, _, stderr := benchCLI(t, "codec", "--corpus", t.TempDir()); code != exitBadInput {
		t.Errorf("empty corpus: exit %d, want %d (%s)", code, exitBadInput, stderr)
	}
}
