package delta

import (
	"bytes"
	"errors"
	"hash/crc32"
	"testing"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/testkit"
)

// replyCorpus answers every turn of every corpus conversation as the
// provider of docs/protocol.md §4.3 "Reply deltas" does: the response
// compressed against D_r = base response ‖ request (turn 1 of a
// conversation travels in full, so its D_r is the request alone), and
// checks that each decodes to its exact bytes. It returns the JSON bytes
// of the responses, the bytes of their frames and those of the same
// responses as plain M2M v1 frames.
func replyCorpus(t testing.TB) (jsonBytes, frameBytes, plainBytes, deltas int) {
	for _, conv := range conversations(t) {
		for i, cur := range conv {
			var base *Base
			if i > 0 {
				base = NewBase(conv[i-1].request, conv[i-1].response)
			}
			dict := AppendReplyDict(nil, base, cur.request)
			fr, isDelta, err := AppendEncodeReply(nil, cur.response, dict, frame.Limits{})
			if err != nil {
				t.Fatalf("%s: %v", cur.name, err)
			}
			plain, err := frame.AppendEncode(nil, cur.response, frame.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			var back []byte
			if isDelta {
				deltas++
				if len(fr) >= len(plain) {
					t.Fatalf("%s: reply delta of %d bytes, plain frame %d", cur.name, len(fr), len(plain))
				}
				back, err = AppendDecodeReply([]byte("x"), fr, dict, frame.Limits{})
			} else {
				if !bytes.Equal(fr, plain) {
					t.Fatalf("%s: not a delta, and not the plain frame either", cur.name)
				}
				back, err = frame.AppendDecode([]byte("x"), fr, frame.Limits{})
			}
			if err != nil || !bytes.Equal(back[1:], cur.response) || back[0] != 'x' {
				t.Fatalf("%s: decoded %d bytes, %v", cur.name, len(back), err)
			}
			jsonBytes += len(cur.response)
			frameBytes += len(fr)
			plainBytes += len(plain)
		}
	}
	return
}

// The corpus responses travel smaller as reply deltas, and come back byte
// for byte.
func TestReplyCorpusRoundTrip(t *testing.T) {
	j, f, p, n := replyCorpus(t)
	t.Logf("level %v: %d responses' JSON, %d bytes: %d bytes as frames with %d reply deltas (%.2fx), %d as plain M2M v1 frames (%.2fx)",
		level, j, j, f, n, float64(j)/float64(f), p, float64(j)/float64(p))
	if f >= p || n == 0 {
		t.Fatalf("%d reply deltas: %d bytes, plain frames %d", n, f, p)
	}
}

func TestReplyErrors(t *testing.T) {
	conv := conversations(t)[0]
	base := NewBase(conv[3].request, conv[3].response)
	req, resp := conv[4].request, conv[4].response
	dict := AppendReplyDict(nil, base, req)
	fr, isDelta, err := AppendEncodeReply(nil, resp, dict, frame.Limits{})
	if err != nil || !isDelta {
		t.Fatal(isDelta, err)
	}
	var h frame.Header
	if err := frame.ReadHeader(fr, &h); err != nil || h.Schema != frame.SchemaResponse || h.Ext != (frame.Extension{Delta: true}) ||
		h.Flags.Compressed() || h.CRC != crc32.ChecksumIEEE(resp) {
		t.Fatalf("header %+v, %v", h, err)
	}
	if _, err := frame.AppendDecode(nil, fr, frame.Limits{}); !errors.Is(err, frame.ErrDelta) {
		t.Errorf("frame.AppendDecode: %v, want ErrDelta", err)
	}
	// The dictionary without the base response (the provider thought the
	// request was full), with one byte changed, or another turn's: the
	// decoding fails, never silently.
	changed := bytes.Clone(dict)
	changed[2] ^= 0x20 // the base response's "id", which the response copies
	for name, d := range map[string][]byte{
		"request alone": AppendReplyDict(nil, nil, req),
		"changed byte":  changed,
		"other turn":    AppendReplyDict(nil, NewBase(conv[7].request, conv[7].response), conv[8].request),
		"empty":         nil,
	} {
		out, err := AppendDecodeReply([]byte("keep"), fr, d, frame.Limits{})
		if (!errors.Is(err, ErrBaseMismatch) && !errors.Is(err, ErrCorrupt)) || string(out) != "keep" {
			t.Errorf("%s: %q, %v", name, out, err)
		}
	}
	// The limit counts the response, not the delta.
	if _, err := AppendDecodeReply(nil, fr, dict, frame.Limits{MaxDecompressed: len(resp) - 1}); !errors.Is(err, frame.ErrLimit) {
		t.Errorf("limit: %v, want ErrLimit", err)
	}
	if _, err := AppendDecodeReply(nil, fr, dict, frame.Limits{MaxMessage: len(fr) - 1}); !errors.Is(err, frame.ErrLimit) {
		t.Errorf("message limit: %v, want ErrLimit", err)
	}
	// A request's delta, a plain response and a reply delta are each
	// decoded by their own function.
	reqDelta, _, err := AppendEncodeFrame(nil, req, frame.Extension{DocID: 5, BaseID: 4}, base, frame.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := frame.AppendEncode(nil, resp, frame.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string][]byte{"request delta": reqDelta, "plain response": plain} {
		if _, err := AppendDecodeReply(nil, f, dict, frame.Limits{}); !errors.Is(err, ErrNotDelta) {
			t.Errorf("AppendDecodeReply of a %s: %v, want ErrNotDelta", name, err)
		}
	}
	if _, err := AppendDecodeFrame(nil, fr, base, frame.Limits{}); !errors.Is(err, ErrNotDelta) {
		t.Errorf("AppendDecodeFrame of a reply delta: %v, want ErrNotDelta", err)
	}
	// Only a chat response travels as a reply delta; anything else gets
	// its plain frame.
	for _, doc := range [][]byte{req, []byte(`{"object":"list","data":[{"embedding":[0.5]}]}`)} {
		got, isDelta, err := AppendEncodeReply(nil, doc, AppendReplyDict(nil, nil, doc), frame.Limits{})
		want, _ := frame.AppendEncode(nil, doc, frame.Limits{})
		if err != nil || isDelta || !bytes.Equal(got, want) {
			t.Errorf("%.20s…: delta %v, %v", doc, isDelta, err)
		}
	}
	// A dictionary that shares nothing with the response: the plain
	// frame when it is smaller.
	got, isDelta, err := AppendEncodeReply([]byte("pre"), resp, []byte(`{"a":1}`), frame.Limits{})
	if err != nil || (isDelta == bytes.Equal(got[3:], plain)) || (!isDelta && string(got[:3]) != "pre") {
		t.Errorf("poor dictionary: delta %v, %d bytes (plain %d), %v", isDelta, len(got), len(plain), err)
	}
	// Every single-bit change of the payload fails, or decodes to the
	// response's exact CRC.
	at := h.PayloadOffset() + 8
	for i := at; i < len(fr); i++ {
		for bit := range 8 {
			bad := bytes.Clone(fr)
			bad[i] ^= 1 << bit
			if out, err := AppendDecodeReply(nil, bad, dict, frame.Limits{}); err == nil && crc32.ChecksumIEEE(out) != h.CRC {
				t.Fatalf("byte %d bit %d: decoded without error to another response", i, bit)
			}
		}
	}
}

// The worked example of docs/protocol.md §4.3 "Reply deltas": the answer
// to the delta of TestProtocolExample, whose D_r is the base response
// followed by that request. A decoder must turn these bytes, with this
// D_r, into this response.
const (
	exampleReply      = `{"id":"chatcmpl-2","object":"chat.completion","created":1732000001,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"2, 3 and 5."},"finish_reason":"stop"}]}`
	exampleReplyFrame = `23 4d 32 4d 7c 31 7c 1b 00 02 00 00 00 00 02 00
		00 00 00 00 00 00 00 00 00 00 00 00 00 ff 00 00
		01 01 21 00 00 00 f5 f9 92 cb 20 ba e5 00 00 68
		32 31 32 2c 20 33 20 61 6e 64 20 35 2e 04 10 08
		62 8c 7b 1b ca 6a 8b a4 0d 01 02`
	// exampleReplyFrameFull is the same reply delta with the response's
	// fields (id, model, finish_reason), as writers before the rule that a
	// reply delta leaves them empty wrote it: readers accept both.
	exampleReplyFrameFull = `23 4d 32 4d 7c 31 7c 2b 00 02 00 00 00 00 02 00
		00 00 00 00 00 00 00 00 00 00 00 0a 63 68 61 74
		63 6d 70 6c 2d 32 06 67 70 74 2d 34 6f 00 00 00
		01 01 21 00 00 00 f5 f9 92 cb 20 ba e5 00 00 68
		32 31 32 2c 20 33 20 61 6e 64 20 35 2e 04 10 08
		62 8c 7b 1b ca 6a 8b a4 0d 01 02`
)

func TestReplyProtocolExample(t *testing.T) {
	dict := AppendReplyDict(nil, NewBase([]byte(exampleRequest), []byte(exampleResponse)), []byte(exampleDoc))
	if len(dict) != 197+165 {
		t.Fatalf("D_r of %d bytes", len(dict))
	}
	for i, hx := range []string{exampleReplyFrame, exampleReplyFrameFull} {
		fr := testkit.Unhex(t, hx)
		resp, err := AppendDecodeReply(nil, fr, dict, frame.Limits{})
		if err != nil || string(resp) != exampleReply {
			t.Fatalf("frame %d: decoded %q, %v", i, resp, err)
		}
		var h frame.Header
		if err := frame.ReadHeader(fr, &h); err != nil || h.Ext != (frame.Extension{Delta: true}) || h.PayloadLen != 33 {
			t.Fatalf("frame %d: header %+v, %v", i, h, err)
		}
		if i == 1 {
			if h.HeaderLen != 43 || string(h.ID) != "chatcmpl-2" || h.FinishReason != frame.FinishStop {
				t.Fatalf("full frame: header %+v", h)
			}
			continue
		}
		// The Go encoder writes exactly these bytes, with empty response
		// fields (the zstd level is the writer's choice; this pins ours).
		if h.HeaderLen != 27 || len(h.ID) != 0 || len(h.Model) != 0 || h.FinishReason != frame.FinishUnknown || h.Flags != frame.FlagHasExtensions {
			t.Fatalf("header %+v", h)
		}
		again, isDelta, err := AppendEncodeReply(nil, []byte(exampleReply), dict, frame.Limits{})
		if err != nil || !isDelta || !bytes.Equal(again, fr) {
			t.Fatalf("encoded %x, delta %v, %v", again, isDelta, err)
		}
	}
}
