// Package testkit holds the helpers that the tests of several packages
// share, written once: hex dumps of wire bytes, the repository's corpus of
// LLM API documents (testdata/corpus), and a context that ends with the
// test. It imports nothing of m2md but the leaf internal/configerr, so any
// package's tests may use it.
package testkit

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Unhex decodes a hex dump, ignoring whitespace anywhere in it, so that
// vectors can be written as the wire reference prints them (bytes in
// groups, across lines). A malformed dump fails the test.
func Unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatalf("bad hex in test: %v", err)
	}
	return b
}

// Context returns a context that ends after d or when the test ends,
// whichever comes first, so that a test waiting on the network cannot hang.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// MinCorpus is the fewest documents the corpus may have: the 77 single
// documents and 36 conversation turns testdata/corpus/README.md lists. Fewer
// means the corpus was not found whole, and a test over it would prove less
// than it says.
const MinCorpus = 113

// Doc is one document of the corpus: its path below testdata/corpus (with
// forward slashes) and its bytes.
type Doc struct {
	Name string
	Data []byte
}

// CorpusDir returns testdata/corpus of the module the test runs in, found
// from the working directory (a test runs in its package's directory), so
// that it does not depend on how deep the package sits.
func CorpusDir() (string, error) { return corpusDir() }

var corpusDir = sync.OnceValues(func() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "testdata", "corpus"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("testkit: no go.mod above the working directory")
		}
		dir = parent
	}
})

// ReadCorpus reads every JSON document below testdata/corpus (its
// conversation folders included), in lexical order.
func ReadCorpus() ([]Doc, error) {
	root, err := corpusDir()
	if err != nil {
		return nil, err
	}
	var docs []Doc
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".json") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		docs = append(docs, Doc{filepath.ToSlash(rel), b})
		return nil
	})
	return docs, err
}

// Corpus is ReadCorpus for a test: it fails the test when the corpus cannot
// be read or has fewer than MinCorpus documents.
func Corpus(t testing.TB) []Doc {
	t.Helper()
	docs, err := ReadCorpus()
	if err != nil {
		t.Fatalf("corpus: %v", err)
	}
	if len(docs) < MinCorpus {
		t.Fatalf("corpus: %d documents, want the whole corpus (at least %d)", len(docs), MinCorpus)
	}
	return docs
}

// CorpusFile returns one document of the corpus by its path below
// testdata/corpus; a missing one fails the test.
func CorpusFile(t testing.TB, name string) []byte {
	t.Helper()
	root, err := corpusDir()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// LockedBuffer is a destination for logs or a process's output that one
// goroutine writes while a test reads it.
type LockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *LockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
