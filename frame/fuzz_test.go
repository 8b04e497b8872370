package frame

import (
	"bytes"
	"errors"
	"hash/crc32"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/m2md/m2md/internal/jsonscan"
	"github.com/m2md/m2md/internal/testkit"
)

// Seeds shared by the fuzz targets: the wire reference's vectors and the
// small corpus documents.
var seedDocs = []string{
	frameAJSON,
	`{"model":"x","messages":[]}`,
	`{"id":"chatcmpl-1","choices":[{"finish_reason":"length"}],"usage":{"prompt_tokens":7}}`,
	`{"model":"gpt-4o-mini","messages":[{"role":"developer","content":[{"type":"text","text":"abc"},{"type":"image_url","image_url":{"url":"x"}}]},{"role":"tool","content":"ok"}],"stream":true,"tools":[],"max_tokens":300}`,
	`{"model":"gpt-4o","messages":[{"role":"function","content":"a"},{"role":"user","content":"b"}],"max_tokens":null}`,
	`{"id":"chatcmpl-2","model":"o1","choices":[{"message":{"tool_calls":[],"refusal":"no"},"finish_reason":"content_filter"}],"usage":{"prompt_tokens":1,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":3},"completion_tokens_details":{"reasoning_tokens":4}}}`,
	`[1,2,3]`, `"text"`, `null`,
}

func seedJSON(f *testing.F) [][]byte {
	var docs [][]byte
	for _, s := range seedDocs {
		docs = append(docs, []byte(s))
	}
	for _, c := range testkit.Corpus(f) {
		if len(c.Data) <= 2048 {
			docs = append(docs, c.Data)
		}
	}
	return docs
}

// seedFrames adds binary frames (or their text shape) of the seed
// documents, plus the malformed inputs of the wire reference §11.
func seedFrames(f *testing.F, text bool) {
	for _, doc := range seedJSON(f) {
		var fr []byte
		var err error
		if text {
			fr, err = AppendEncodeText(nil, doc, Limits{})
		} else {
			fr, err = AppendEncode(nil, doc, Limits{})
		}
		if err != nil {
			f.Fatal(err)
		}
		f.Add(fr)
	}
	for _, s := range []string{"", "#INVALID|1|data", "#M2M|1|", "#M2M|1|short", "#M2M|1|" + string(make([]byte, 50))} {
		f.Add([]byte(s))
	}
	f.Add(bytes.Repeat([]byte{0xff}, 100))
}

// checkDecoded verifies what a successful decode returned.
func checkDecoded(t *testing.T, frame, out []byte) {
	t.Helper()
	if !utf8.Valid(out) || jsonscan.Validate(out, jsonscan.Limits{}) != nil {
		t.Fatalf("decoded payload is not valid JSON: %q", out)
	}
	var h Header
	if err := ReadHeader(frame, &h); err != nil {
		t.Fatalf("frame decodes but ReadHeader fails: %v", err)
	}
	if crc32.ChecksumIEEE(out) != h.CRC || h.Security == SecurityAEAD {
		t.Fatalf("decoded payload does not match header %+v", h)
	}
}

func FuzzDecodeBinary(f *testing.F) {
	seedFrames(f, false)
	f.Fuzz(func(t *testing.T, frame []byte) {
		out, err := AppendDecode([]byte("keep"), frame, Limits{})
		if err != nil {
			if string(out) != "keep" {
				t.Fatalf("dst changed on error: %q", out)
			}
			return
		}
		checkDecoded(t, frame, out[4:])
	})
}

func FuzzDecodeText(f *testing.F) {
	seedFrames(f, true)
	f.Add([]byte("#M2M|1|IgABAQAAAAAAAAAAAAAAAAAAAAAGZ3B0LTRvAQECCtejOz4AAABuYFWkeyJtb2RlbCI6ImdwdC00byIsIm1lc3NhZ2VzIjpbeyJyb2xlIjoidXNlciIsImNvbnRlbnQiOiJIaSJ9XX32hBjyzhkGGaLEzPY18OnpwGUaO7vGYnA32mMOFrxmcg=="))
	f.Fuzz(func(t *testing.T, text []byte) {
		out, err := decodeText([]byte("keep"), text, Limits{})
		if err != nil {
			if string(out) != "keep" {
				t.Fatalf("dst changed on error: %q", out)
			}
			return
		}
		bin, berr := b64.DecodeString(string(text[PrefixLen:]))
		if berr != nil {
			t.Fatalf("text decodes but its Base64 does not: %v", berr)
		}
		frame := append([]byte(Prefix), bin...)
		checkDecoded(t, frame, out[4:])
		var h Header
		if err := ReadTextHeader(text, &h); err != nil {
			t.Fatalf("text decodes but ReadTextHeader fails: %v", err)
		}
	})
}

// FuzzReadHeader reads input as a binary frame and, re-encoded, as a text
// frame: both readers must agree on the outcome and on every field.
func FuzzReadHeader(f *testing.F) {
	seedFrames(f, false)
	f.Fuzz(func(t *testing.T, frame []byte) {
		var hb, ht Header
		errB := ReadHeader(frame, &hb)
		if len(frame) < PrefixLen || string(frame[:PrefixLen]) != Prefix {
			if !errors.Is(errB, ErrBadPrefix) {
				t.Fatalf("wrong prefix accepted: %v", errB)
			}
			return
		}
		text := append([]byte(Prefix), b64.EncodeToString(frame[PrefixLen:])...)
		errT := ReadTextHeader(text, &ht)
		if (errB == nil) != (errT == nil) {
			t.Fatalf("binary: %v; text: %v", errB, errT)
		}
		if errB != nil {
			for _, sentinel := range []error{ErrTruncated, ErrMalformed} {
				if errors.Is(errB, sentinel) != errors.Is(errT, sentinel) {
					t.Fatalf("binary: %v; text: %v", errB, errT)
				}
			}
			return
		}
		if d := diffHeaders(hb, ht); d != "" {
			t.Fatalf("headers differ: %s", d)
		}
		if hb.PayloadKnown && PrefixLen+hb.HeaderLen+8+int(hb.PayloadLen) > len(frame) {
			t.Fatalf("header promises more bytes than the frame has: %+v", hb)
		}
		if n := hb.RoleCount(); n > 0 {
			if _, ok := hb.Role(n - 1); !ok {
				t.Fatal("last role unreadable")
			}
		}
	})
}

func FuzzBrotliText(f *testing.F) {
	for _, doc := range seedJSON(f)[:12] {
		enc, err := AppendEncodeBrotliText(nil, doc, Limits{})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(enc)
		f.Add(doc)
	}
	for _, text := range []string{"hello", "日本語のテキスト", "{}", strings.Repeat("ab", 60)} {
		enc, err := AppendEncodeBrotliText(nil, []byte(text), Limits{})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(enc)
		f.Add([]byte(text))
	}
	f.Add([]byte("#M2M[v3.0]|"))
	f.Add([]byte("#M2M[v3.0]|DATA:"))
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := AppendDecodeBrotliText([]byte("keep"), in, Limits{})
		if err != nil && string(out) != "keep" {
			t.Fatalf("dst changed on error: %q", out)
		}
		if err == nil && !utf8.Valid(out) {
			t.Fatalf("decoded text is not UTF-8")
		}
		// Encoding is not fuzzed here: quality 11 under coverage
		// instrumentation takes seconds per input. TestBrotliText covers
		// the round trip; the decoder is what faces untrusted bytes.
	})
}

// FuzzEncodeRoundTrip: any document that encodes decodes to the same
// bytes, in both shapes, and its header is the one the Rust encoder would
// write (refHeader).
func FuzzEncodeRoundTrip(f *testing.F) {
	for _, doc := range seedJSON(f) {
		f.Add(doc)
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		bin, err := AppendEncode(nil, doc, Limits{})
		if err != nil {
			if jsonscan.Validate(doc, jsonscan.Limits{}) == nil && !errors.Is(err, ErrFieldTooLong) {
				t.Fatalf("valid JSON refused: %v", err)
			}
			return
		}
		text, err := AppendEncodeText(nil, doc, Limits{})
		if err != nil {
			t.Fatalf("binary encodes, text does not: %v", err)
		}
		checkRoundTrip(t, string(doc), bin, text)
		// Stored (CompressFrom -1): the same frame but for the flag and
		// the payload, which decodes to the document.
		stored, err := AppendEncode(nil, doc, Limits{CompressFrom: -1})
		if err != nil {
			t.Fatalf("encodes compressed, not stored: %v", err)
		}
		if got, err := AppendDecode(nil, stored, Limits{}); err != nil || !bytes.Equal(got, doc) {
			t.Fatalf("stored frame decodes to %q, %v", got, err)
		}
		var hb, ht Header
		if err := ReadHeader(bin, &hb); err != nil {
			t.Fatal(err)
		}
		if err := ReadTextHeader(text, &ht); err != nil {
			t.Fatal(err)
		}
		if d := diffHeaders(hb, ht); d != "" {
			t.Fatalf("headers differ: %s", d)
		}
		ref := refHeader(t, doc, bin)
		if hb.RoutingMisaligned {
			// Only the Rust layout's known ambiguities may misalign, and
			// what comes before them must still be right.
			if !ref.RoutingMisaligned {
				t.Fatalf("misaligned routing header for %q", doc)
			}
			if string(hb.Model) != string(ref.Model) || hb.MsgCount != ref.MsgCount || hb.Flags != ref.Flags {
				t.Fatalf("header %+v, want %+v", hb, ref)
			}
			return
		}
		if ref.RoutingMisaligned {
			// The ambiguity happened to line up: fields after msg_count
			// are not meaningful, the rest must be.
			hb.Roles, hb.ContentHint, hb.MaxTokens, hb.HasMaxTokens, hb.EstCost, hb.HasEstCost = ref.Roles, ref.ContentHint, ref.MaxTokens, ref.HasMaxTokens, ref.EstCost, ref.HasEstCost
			ref.RoutingMisaligned = false
		}
		if d := diffHeaders(hb, ref); d != "" {
			t.Fatalf("header differs from the reference for %q: %s", doc, d)
		}
	})
}

// FuzzReadTextHeader: the header-only reader of the text shape is as strict
// about Base64 as the full decoder: whatever it accepts, the strict
// decoder decodes (an independent decoder found `m2md inspect` accepting
// non-canonical padding that `m2md decompress` refused).
func FuzzReadTextHeader(f *testing.F) {
	seedFrames(f, true)
	f.Fuzz(func(t *testing.T, text []byte) {
		var h Header
		if ReadTextHeader(text, &h) != nil {
			return
		}
		if _, err := b64.DecodeString(string(text[PrefixLen:])); err != nil {
			t.Fatalf("ReadTextHeader accepted Base64 the decoder refuses: %v", err)
		}
	})
}

// FuzzExtension reads arbitrary extension blocks at the end of frame A's
// routing header (seeds under testdata/fuzz/FuzzExtension: the valid and
// malformed blocks of docs/protocol.md §4.3). A block that reads is
// canonical: writing what was read gives the same bytes back, and
// stripping it gives the frame without a block.
func FuzzExtension(f *testing.F) {
	for _, s := range []string{"\x00\x01\x02", "\x02\xac\x02\x07\x04", "\x03\xad\x02\xac\x02\x05", "\x01\x01\x02", "\x00\x81\x00\x03", "\x00", ""} {
		f.Add([]byte(s))
	}
	routing := []byte("\x06gpt-4o\x01\x01\x02\x0a\xd7\xa3\x3b")
	payload := []byte(frameAJSON)
	plain, err := AppendEncode(nil, payload, Limits{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, block []byte) {
		if len(routing)+len(block) > 0xffff-FixedHeaderLen {
			return
		}
		v := append(append([]byte{}, routing...), block...)
		fr := assemble(SchemaRequest, SecurityNone, FlagHasExtensions, v, payload, crc32.ChecksumIEEE(payload))
		var h Header
		if err := ReadHeader(fr, &h); err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is not ErrMalformed", err)
			}
			return
		}
		if !h.Ext.Present() || h.ExtLen != len(block) || (h.Ext.Delta && h.Ext.BaseID == 0) {
			t.Fatalf("block %x read as %+v (%d bytes)", block, h.Ext, h.ExtLen)
		}
		if again := appendExtension(nil, h.Ext); !bytes.Equal(again, block) {
			t.Fatalf("block %x read as %+v, written back as %x", block, h.Ext, again)
		}
		if h.Ext.Delta {
			return
		}
		got, err := StripExtension(fr)
		if err != nil || !bytes.Equal(got, plain) {
			t.Fatalf("StripExtension: %x, %v", got, err)
		}
	})
}

// FuzzReplyExtension reads arbitrary variable headers of a response frame
// (schema 02) with HAS_EXTENSIONS, with and without the cost estimate's
// flag (seeds under testdata/fuzz/FuzzReplyExtension: the valid block after
// the fields of a response and the malformed ones of docs/protocol.md
// §4.3). A header that reads ends with the block 01 01, right after
// response fields that read the same without it.
func FuzzReplyExtension(f *testing.F) {
	fields := "\x0fchatcmpl-abc123\x06gpt-4o\x00\x32\x0a\x9a\x99\x19\x37"
	for _, s := range []string{fields + "\x01\x01", fields + "\x00\x01\x02", fields + "\x03\x01", fields + "\xee\x01\x01", "\x01\x01", ""} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	payload := []byte{1, 2, 3}
	f.Fuzz(func(t *testing.T, v []byte, cost bool) {
		if len(v) > 0xffff-FixedHeaderLen {
			return
		}
		flags := FlagHasExtensions
		if cost {
			flags |= flagHasCostEstimate
		}
		var h Header
		if err := ReadHeader(assemble(SchemaResponse, SecurityNone, flags, v, payload, 7), &h); err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is not ErrMalformed", err)
			}
			return
		}
		if h.Ext != (Extension{Delta: true}) || h.ExtLen != 2 || !bytes.HasSuffix(v, replyBlock[:]) {
			t.Fatalf("header %x read as %+v (%d bytes)", v, h.Ext, h.ExtLen)
		}
		var bare Header
		if err := ReadHeader(assemble(SchemaResponse, SecurityNone, flags&^FlagHasExtensions, v[:len(v)-2], payload, 7), &bare); err != nil {
			t.Fatalf("fields without the block: %v", err)
		}
		rest, _ := bare.parseResponse(v[:len(v)-2])
		if rest != 0 || string(bare.ID) != string(h.ID) || bare.PromptTokens != h.PromptTokens || bare.HasEstCost != h.HasEstCost {
			t.Fatalf("fields read as %+v with the block, %+v without (%d bytes left)", h, bare, rest)
		}
	})
}

// FuzzExpand rebuilds arbitrary compact frames (docs/protocol.md §4.5;
// seeds under testdata/fuzz/FuzzExpand: compact frames of every mode from
// the round trip, and refused ones). A refusal leaves dst alone and wraps
// a sentinel; a frame that rebuilds is canonical: compacting the rebuilt
// frame, in place too, gives the input back. The input is also compacted
// as if it were an M2M v1 frame: what compacts rebuilds to the input.
func FuzzExpand(f *testing.F) {
	f.Add([]byte("C\x08\x01\x01\x02\x03\x04\x05"), uint32(0))
	f.Add([]byte("C\x00\x02\x00\x07\x00\x00\xff\x00\x00\x01\x01\x01\x01\x02\x03\x04\x05"), uint32(4))
	for _, ext := range []Extension{{DocID: 1}, {DocID: 300, BaseID: 7}} {
		fr, err := AppendEncodeExt(nil, []byte(frameAJSON), ext, Limits{})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(fr, uint32(0))
	}
	f.Fuzz(func(t *testing.T, c []byte, ch uint32) {
		if cf, ok := AppendCompact(nil, c, ch); ok {
			back, err := AppendExpand(nil, cf, ch)
			if err != nil || !bytes.Equal(back, c) {
				t.Fatalf("%x compacts to %x, which rebuilds to %x, %v", c, cf, back, err)
			}
		}
		out, err := AppendExpand([]byte("keep"), c, ch)
		if err != nil {
			if string(out) != "keep" {
				t.Fatalf("dst changed on error: %q", out)
			}
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrBadPrefix) {
				t.Fatalf("error %v wraps no sentinel", err)
			}
			return
		}
		fr := out[4:]
		if len(fr)-len(c) > MaxCompactGrowth {
			t.Fatalf("%d bytes rebuilt to %d", len(c), len(fr))
		}
		again, ok := AppendCompact(nil, fr, ch)
		if !ok || !bytes.Equal(again, c) {
			t.Fatalf("%x rebuilt to %x compacts to %x, %v", c, fr, again, ok)
		}
		if in, ok := AppendCompact(fr[:0], fr, ch); !ok || !bytes.Equal(in, c) {
			t.Fatalf("in place: %x, %v", in, ok)
		}
	})
}
