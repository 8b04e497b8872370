package bench

import (
	"bytes"
	"encoding/json"
	"io"
	"testing"
)

// decodeReport writes rep's JSON report and decodes it into v, as a reader
// of --json would.
func decodeReport(t testing.TB, rep interface{ WriteJSON(io.Writer) error }, v any) {
	t.Helper()
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(buf.Bytes(), v); err != nil {
		t.Fatal(err)
	}
}
