package frame

import (
	"encoding/hex"
	"strings"
	"testing"
)

// The example of docs/protocol.md §4.6: a Responses API request with its
// API byte, and the byte read back.
func TestAPIByte(t *testing.T) {
	fr, err := AppendEncodeSchema(nil, []byte(`{"model":"gpt-4o","input":"Hi"}`), SchemaRequest, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if err := SetAPI(fr, APIResponses); err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"234d324d7c317c", "2100", "0100", "00000100", strings.Repeat("00", 12),
		"066770742d346f0000", "0ad7a33b", "1f000000", "e7357746",
		hex.EncodeToString([]byte(`{"model":"gpt-4o","input":"Hi"}`)),
	}, "")
	if got := hex.EncodeToString(fr); got != want {
		t.Fatalf("frame\n%s\nwant\n%s", got, want)
	}
	var h Header
	if err := ReadHeader(fr, &h); err != nil {
		t.Fatal(err)
	}
	if h.Flags.API() != APIResponses || string(h.Model) != "gpt-4o" {
		t.Fatalf("API %v, model %q", h.Flags.API(), h.Model)
	}
	resp, _ := AppendEncodeSchema(nil, []byte(`{"id":"x","choices":[]}`), SchemaResponse, Limits{})
	if err := SetAPI(resp, APIResponses); err == nil {
		t.Fatal("SetAPI on a response frame")
	}
	if APIChat.String() != "/chat/completions" || APICompletions.String() != "/completions" || API(9).Known() {
		t.Fatal("API names")
	}
}
