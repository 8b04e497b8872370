package frame

import (
	"bytes"
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

// The examples of docs/protocol.md §4.7: a request asking for headers,
// and a headers reply.
func TestHeadersReplyBytes(t *testing.T) {
	rq, _ := AppendEncodeSchema(nil, []byte(`{"model":"gpt-4o","input":"Hi"}`), SchemaRequest, Limits{})
	SetAPI(rq, APIResponses)
	if err := SetWantsHeaders(rq); err != nil {
		t.Fatal(err)
	}
	var h Header
	if err := ReadHeader(rq, &h); err != nil || !h.Flags.WantsHeaders() || h.Flags.API() != APIResponses {
		t.Fatalf("flags %08x, %v", uint32(h.Flags), err)
	}
	if got := hex.EncodeToString(rq[OffFlags : OffFlags+4]); got != "00800100" {
		t.Fatalf("flags bytes %s", got)
	}
	chunk, _ := AppendEncodeSchema(nil, []byte(`{"x-request-id":"req_1"}`), SchemaStream, Limits{})
	if IsHeadersReply(chunk) {
		t.Fatal("a plain chunk taken for a headers reply")
	}
	fr, err := AppendEncodeHeadersReply(nil, []byte(`{"x-request-id":"req_1"}`), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	want := "234d324d7c317c" + "1400" + "0300" + "00000100" + strings.Repeat("00", 12) + "18000000" + "c142917f" +
		hex.EncodeToString([]byte(`{"x-request-id":"req_1"}`))
	if got := hex.EncodeToString(fr); got != want || !IsHeadersReply(fr) {
		t.Fatalf("headers reply\n%s\nwant\n%s", got, want)
	}
	if err := SetWantsHeaders(fr); err == nil {
		t.Fatal("SetWantsHeaders on a chunk")
	}
}

// A headers reply is never compressed, whatever its length (§4.7), and
// decodes to its JSON like any frame.
func TestHeadersReplyStored(t *testing.T) {
	json := []byte(`{"openai-processing-ms":"412","x-ratelimit-limit-requests":"10000","x-ratelimit-limit-tokens":"30000000",` +
		`"x-ratelimit-remaining-requests":"9999","x-ratelimit-remaining-tokens":"29999000","x-request-id":"req_0123456789abcdef"}`)
	fr, err := AppendEncodeHeadersReply(nil, json, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	var h Header
	if err := ReadHeader(fr, &h); err != nil || h.Flags.Compressed() || !IsHeadersReply(fr) || h.Schema != SchemaStream {
		t.Fatalf("headers reply of %d bytes: flags %08x schema %02x, %v", len(json), uint32(h.Flags), byte(h.Schema), err)
	}
	got, err := AppendDecode(nil, fr, Limits{})
	if err != nil || !bytes.Equal(got, json) {
		t.Fatalf("decoded %q, %v", got, err)
	}
}
