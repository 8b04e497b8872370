package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// errorCode extracts error.code from an error frame's JSON body.
func errorCode(body []byte) string {
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil {
		return "?"
	}
	return e.Error.Code
}

// corpus reads a file of the test corpus.
func corpus(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", "corpus", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
