// Package llama3vocab finds the real Llama 3 vocabulary for tests and
// benchmarks. It is not in the repository: the Go module proxy serves it
// inside github.com/ollama/ollama@v0.17.4 (tokenizer/testdata/llama3.2:
// encoder.json and vocab.bpe), so a fresh machine with only Go can get it.
// The environment variable M2MD_LLAMA3_VOCAB overrides the download.
package llama3vocab

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

const (
	// Module is the module version that carries the vocabulary.
	Module = "github.com/ollama/ollama@v0.17.4"
	// ModuleDir is the vocabulary's folder inside Module.
	ModuleDir = "tokenizer/testdata/llama3.2"
	// EnvVar names a folder (or file) to use instead of the download.
	EnvVar = "M2MD_LLAMA3_VOCAB"
)

// Locate returns the vocabulary folder, downloading the module through the
// Go module proxy on first use (about 23 MB, cached by Go afterwards).
var Locate = sync.OnceValues(func() (string, error) {
	if p := os.Getenv(EnvVar); p != "" {
		return p, nil
	}
	goBin := filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		goBin = "go"
	}
	// Run outside any module, so the download cannot touch this module's go.mod.
	dir, err := os.MkdirTemp("", "m2md-llama3-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	cmd := exec.Command(goBin, "mod", "download", "-json", Module)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	var info struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &info); jerr == nil && info.Error != "" {
		return "", fmt.Errorf("go mod download %s: %s", Module, info.Error)
	}
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("go mod download %s: %v: %s", Module, err, ee.Stderr)
		}
		return "", fmt.Errorf("go mod download %s: %w", Module, err)
	}
	if info.Dir == "" {
		return "", fmt.Errorf("go mod download %s printed no Dir", Module)
	}
	return filepath.Join(info.Dir, filepath.FromSlash(ModuleDir)), nil
})

// ForTest returns the vocabulary folder. Without it the test fails under CI
// (environment variable CI set) and is skipped elsewhere.
func ForTest(t testing.TB) string {
	t.Helper()
	p, err := Locate()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("Llama 3 vocabulary unavailable (set %s to a folder with encoder.json): %v", EnvVar, err)
		}
		t.Skipf("Llama 3 vocabulary unavailable (set %s, or allow `go mod download %s`): %v", EnvVar, Module, err)
	}
	return p
}
