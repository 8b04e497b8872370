package delta

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/m2md/m2md/frame"
)

// halfNew is a turn whose document repeats its base and adds as much text
// that compresses poorly: its delta is smaller than its full frame, but not
// by the ratio that skips comparing the two, so the encoder compares them.
func halfNew(t *testing.T) (base *Base, doc, resp []byte) {
	t.Helper()
	rnd := rand.New(rand.NewPCG(3, 4))
	noise := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rnd.Uint32())
		}
		return base64.StdEncoding.EncodeToString(b)
	}
	old := noise(3000)
	req := fmt.Appendf(nil, `{"model":"gpt-4o","messages":[{"role":"user","content":%q}]}`, old)
	prev := fmt.Appendf(nil, `{"id":"chatcmpl-1","object":"chat.completion","created":1732000000,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`)
	doc = fmt.Appendf(nil, `{"model":"gpt-4o","messages":[{"role":"user","content":%q},{"role":"user","content":%q}]}`, old, noise(2000))
	resp = fmt.Appendf(nil, `{"id":"chatcmpl-2","object":"chat.completion","created":1732000001,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}]}`, old[:1000]+noise(3000))
	return NewBase(req, prev), doc, resp
}

// What the encoders write does not depend on what dst already holds: a
// frame appended after other bytes is the frame written alone, also when
// the encoder weighs a delta against the full frame.
func TestAppendAfterOtherBytes(t *testing.T) {
	base, doc, resp := halfNew(t)
	ext := frame.Extension{DocID: 2, BaseID: 1}
	prefix := bytes.Repeat([]byte{'x'}, 4096)

	alone, isDelta, err := AppendEncodeFrame(nil, doc, ext, base, frame.Limits{})
	if err != nil || !isDelta {
		t.Fatalf("request alone: delta %v, %v", isDelta, err)
	}
	p, err := AppendEncode(nil, doc, base)
	if err != nil || len(p) <= len(doc)/goodRatio {
		t.Fatalf("the request's delta (%d of %d bytes) must need the comparison: %v", len(p), len(doc), err)
	}
	after, isDelta, err := AppendEncodeFrame(bytes.Clone(prefix), doc, ext, base, frame.Limits{})
	if err != nil || !isDelta || !bytes.Equal(after[:len(prefix)], prefix) || !bytes.Equal(after[len(prefix):], alone) {
		t.Errorf("request after %d bytes: delta %v, %d bytes, alone %d, %v", len(prefix), isDelta, len(after)-len(prefix), len(alone), err)
	}

	dict := AppendReplyDict(nil, base, doc)
	alone, isDelta, err = AppendEncodeReply(nil, resp, dict, frame.Limits{})
	if err != nil || !isDelta {
		t.Fatalf("reply alone: delta %v, %v", isDelta, err)
	}
	if p, err = AppendEncode(nil, resp, NewBase(dict, nil)); err != nil || len(p) <= len(resp)/replyGoodRatio {
		t.Fatalf("the reply's delta (%d of %d bytes) must need the comparison: %v", len(p), len(resp), err)
	}
	after, isDelta, err = AppendEncodeReply(bytes.Clone(prefix), resp, dict, frame.Limits{})
	if err != nil || !isDelta || !bytes.Equal(after[:len(prefix)], prefix) || !bytes.Equal(after[len(prefix):], alone) {
		t.Errorf("reply after %d bytes: delta %v, %d bytes, alone %d, %v", len(prefix), isDelta, len(after)-len(prefix), len(alone), err)
	}
}

// A delta frame exactly as long as the message limit is read; one byte
// longer than the limit is not.
func TestDeltaAtTheMessageLimit(t *testing.T) {
	base, doc, _ := corpusTurn(t)
	fr, isDelta, err := AppendEncodeFrame(nil, doc, frame.Extension{DocID: 4, BaseID: 3}, base, frame.Limits{})
	if err != nil || !isDelta {
		t.Fatal(isDelta, err)
	}
	if out, err := AppendDecodeFrame(nil, fr, base, frame.Limits{MaxMessage: len(fr)}); err != nil || !bytes.Equal(out, doc) {
		t.Errorf("frame of exactly MaxMessage bytes: %v", err)
	}
}
