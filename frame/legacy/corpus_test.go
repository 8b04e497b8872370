package legacy

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const corpusDir = "../../testdata/corpus"

type corpusFile struct {
	name string
	data []byte
}

// loadCorpus returns every JSON document of the shared corpus.
func loadCorpus(t testing.TB) []corpusFile {
	t.Helper()
	var files []corpusFile
	err := filepath.WalkDir(corpusDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".json") {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(corpusDir, path)
		files = append(files, corpusFile{rel, data})
		return nil
	})
	if err != nil {
		t.Fatalf("reading corpus: %v", err)
	}
	if len(files) < 100 {
		t.Fatalf("corpus has %d files, expected the full set", len(files))
	}
	return files
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

// corpusFileNamed returns one corpus document, for benchmarks and seeds.
func corpusFileNamed(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(corpusDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}
