package delta

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/testkit"
)

// Every turn of every corpus conversation, as a delta against the turn
// before it and that turn's response, decodes to its exact bytes. The log
// gives the corpus figures of docs/benchmarks.md: the first turns travel
// in full, the others as deltas, doc ids counting from 1 as the Go client's.
func TestCorpusRoundTrip(t *testing.T) {
	corpusRoundTrip(t)
}

func corpusRoundTrip(t testing.TB) (jsonBytes, frameBytes, payloadBytes int) {
	var deltas, m2mBytes int
	var id uint64
	for _, conv := range conversations(t) {
		for _, tu := range conv {
			fr, err := frame.AppendEncode(nil, tu.request, frame.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			m2mBytes += len(fr)
		}
		id++
		first, err := frame.AppendEncodeExt(nil, conv[0].request, frame.Extension{DocID: id}, frame.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		jsonBytes += len(conv[0].request)
		frameBytes += len(first)
		for i := 1; i < len(conv); i++ {
			prev, cur := conv[i-1], conv[i]
			base := NewBase(prev.request, prev.response)
			id++
			ext := frame.Extension{DocID: id, BaseID: id - 1}
			fr, isDelta, err := AppendEncodeFrame(nil, cur.request, ext, base, frame.Limits{})
			if err != nil {
				t.Fatalf("%s: %v", cur.name, err)
			}
			if !isDelta {
				t.Fatalf("%s: full frame of %d bytes instead of a delta", cur.name, len(fr))
			}
			var h frame.Header
			if err := frame.ReadHeader(fr, &h); err != nil || h.Ext != (frame.Extension{DocID: ext.DocID, BaseID: ext.BaseID, Delta: true}) || h.Flags.Compressed() {
				t.Fatalf("%s: header %+v, %v", cur.name, h, err)
			}
			p := fr[h.PayloadOffset()+8:]
			if p[0]&(fhdSingleSegment|fhdChecksum|fhdDictID|fhdReserved) != fhdSingleSegment {
				t.Fatalf("%s: zstd frame header descriptor %08b", cur.name, p[0])
			}
			back, err := AppendDecodeFrame([]byte("x"), fr, base, frame.Limits{})
			if err != nil || !bytes.Equal(back[1:], cur.request) || back[0] != 'x' {
				t.Fatalf("%s: AppendDecodeFrame: %d bytes, %v", cur.name, len(back), err)
			}
			jsonBytes += len(cur.request)
			frameBytes += len(fr)
			payloadBytes += len(p)
			deltas++
		}
	}
	t.Logf("level %v: %d requests, %d JSON bytes in %d frame bytes (%.1fx; %d delta payloads of %d bytes in all); per-message M2M v1 frames: %d bytes (%.2fx)",
		level, int(id), jsonBytes, frameBytes, float64(jsonBytes)/float64(frameBytes), deltas, payloadBytes, m2mBytes, float64(jsonBytes)/float64(m2mBytes))
	return jsonBytes, frameBytes, payloadBytes
}

func corpusTurn(t *testing.T) (base *Base, doc, payload []byte) {
	t.Helper()
	conv := conversations(t)[0]
	base = NewBase(conv[2].request, conv[2].response)
	doc = conv[3].request
	payload, err := AppendEncode(nil, doc, base)
	if err != nil {
		t.Fatal(err)
	}
	return base, doc, payload
}

func TestBaseErrors(t *testing.T) {
	base, doc, _ := corpusTurn(t)
	fr, isDelta, err := AppendEncodeFrame(nil, doc, frame.Extension{DocID: 4, BaseID: 3}, base, frame.Limits{})
	if err != nil || !isDelta {
		t.Fatal(isDelta, err)
	}
	if _, err := AppendDecodeFrame(nil, fr, nil, frame.Limits{}); !errors.Is(err, ErrNoBase) {
		t.Errorf("no base: %v", err)
	}
	// The right base with one byte changed (the document copies it):
	// the CRC-32 tells.
	req := bytes.Clone(base.Request())
	req[1] = '\''
	wrong := NewBase(req, base.Response())
	if _, err := AppendDecodeFrame(nil, fr, wrong, frame.Limits{}); !errors.Is(err, ErrBaseMismatch) {
		t.Errorf("changed base: %v", err)
	}
	// Another turn's base: the reconstruction fails one way or another,
	// never silently.
	conv := conversations(t)[1]
	other := NewBase(conv[5].request, conv[5].response)
	if _, err := AppendDecodeFrame(nil, fr, other, frame.Limits{}); !errors.Is(err, ErrBaseMismatch) && !errors.Is(err, ErrCorrupt) {
		t.Errorf("other base: %v", err)
	}
	// A full frame is not a delta.
	full, err := frame.AppendEncodeExt(nil, doc, frame.Extension{DocID: 4, BaseID: 3}, frame.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := AppendDecodeFrame(nil, full, base, frame.Limits{}); !errors.Is(err, ErrNotDelta) {
		t.Errorf("full frame: %v", err)
	}
	// Without a base there is no delta, only the full frame with BASE.
	got, isDelta, err := AppendEncodeFrame(nil, doc, frame.Extension{DocID: 4, BaseID: 3}, nil, frame.Limits{})
	if err != nil || isDelta || !bytes.Equal(got, full) {
		t.Errorf("no base: delta %v, %v", isDelta, err)
	}
}

// A base that shares nothing with the document gives the full frame when
// that is smaller.
func TestPoorDeltaFallsBack(t *testing.T) {
	conv := conversations(t)[0]
	doc := conv[5].request
	base := NewBase([]byte(`{"a":1}`), []byte(`{"b":2}`))
	fr, isDelta, err := AppendEncodeFrame([]byte("pre"), doc, frame.Extension{DocID: 9, BaseID: 8}, base, frame.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	full, err := frame.AppendEncodeExt([]byte("pre"), doc, frame.Extension{DocID: 9, BaseID: 8}, frame.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if isDelta || !bytes.Equal(fr, full) {
		t.Fatalf("delta %v: %d bytes, full frame %d", isDelta, len(fr), len(full))
	}
}

func TestCorruptDeltas(t *testing.T) {
	base, doc, p := corpusTurn(t)
	lim := frame.Limits{}
	header := func(fhd byte, fcs ...byte) []byte { return append([]byte{fhd}, fcs...) }
	for _, tc := range []struct {
		name    string
		payload []byte
		lim     frame.Limits
		want    error
	}{
		{"empty", nil, lim, ErrCorrupt},
		{"multi-segment without content size", append([]byte{p[0] &^ (fhdSingleSegment | 0xc0), 0x58}, p[1:]...), lim, ErrCorrupt},
		{"reserved bit", append([]byte{p[0] | fhdReserved}, p[1:]...), lim, ErrCorrupt},
		{"dictionary id", append([]byte{p[0] | 1}, p[1:]...), lim, ErrCorrupt},
		{"content size truncated", header(0xa0, 1, 2), lim, ErrCorrupt},
		{"content size 0", header(0x20, 0, 1, 0, 0), lim, ErrCorrupt},
		{"16 MiB + 1", binary.LittleEndian.AppendUint32([]byte{0xa0}, 16<<20+1), lim, frame.ErrLimit},
		{"2^63", binary.LittleEndian.AppendUint64([]byte{0xe0}, 1<<63), lim, frame.ErrLimit},
		{"over the caller's limit", p, frame.Limits{MaxDecompressed: len(doc) - 1}, frame.ErrLimit},
		{"no block", header(0x20, 5), lim, ErrCorrupt},
		{"block past the end", header(0x20, 5, 0x29, 0, 0, 'a'), lim, ErrCorrupt},
		{"reserved block type", header(0x20, 5, 0x07, 0, 0), lim, ErrCorrupt},
		{"trailing byte", append(bytes.Clone(p), 0), lim, ErrCorrupt},
		{"truncated", p[:len(p)-1], lim, ErrCorrupt},
		{"raw block shorter than stated", header(0x20, 5, 0x21, 0, 0, 'a', 'b', 'c', 'd'), lim, ErrCorrupt},
		{"content size over the blocks", header(0x20, 200, 0x29, 0, 0, 'a', 'b', 'c', 'd', 'e'), lim, ErrCorrupt},
		{"16 MiB from one block", append(binary.LittleEndian.AppendUint32([]byte{0xa0}, 16<<20-1), 0x05, 0x00, 0x00), lim, ErrCorrupt},
		{"block over the content size", header(0x20, 4, 0x29, 0, 0, 'a', 'b', 'c', 'd', 'e'), lim, ErrCorrupt},
		{"RLE block over 128 KiB", append(binary.LittleEndian.AppendUint32([]byte{0xa0}, 1<<20), 0x0b, 0x00, 0x20, 'a'), lim, ErrCorrupt},
	} {
		out, err := AppendDecode([]byte("keep"), tc.payload, base, tc.lim)
		if !errors.Is(err, tc.want) || string(out) != "keep" {
			t.Errorf("%s: %q, %v; want %v", tc.name, out, err, tc.want)
		}
	}
	// A raw block of 5 bytes is a valid delta of "abcde".
	if out, err := AppendDecode(nil, header(0x20, 5, 0x29, 0, 0, 'a', 'b', 'c', 'd', 'e'), base, lim); err != nil || string(out) != "abcde" {
		t.Errorf("raw block: %q, %v", out, err)
	}
	// Every single-bit change of a real delta fails, or decodes to the
	// document's exact CRC (a flipped bit the decoder does not read).
	fr, _, err := AppendEncodeFrame(nil, doc, frame.Extension{DocID: 2, BaseID: 1}, base, lim)
	if err != nil {
		t.Fatal(err)
	}
	var h frame.Header
	if err := frame.ReadHeader(fr, &h); err != nil {
		t.Fatal(err)
	}
	at := h.PayloadOffset() + 8
	for i := at; i < len(fr); i++ {
		for bit := 0; bit < 8; bit++ {
			bad := bytes.Clone(fr)
			bad[i] ^= 1 << bit
			out, err := AppendDecodeFrame(nil, bad, base, lim)
			if err == nil && crc32.ChecksumIEEE(out) != h.CRC {
				t.Fatalf("byte %d bit %d: decoded without error to another document", i, bit)
			}
		}
	}
}

// The worked example of docs/protocol.md §4.3: a decoder must turn these
// bytes, with this base, into this document.
const (
	exampleRequest  = `{"model":"gpt-4o","messages":[{"role":"user","content":"Hi"}]}`
	exampleResponse = `{"id":"chatcmpl-1","object":"chat.completion","created":1732000000,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"Hello! How can I help?"},"finish_reason":"stop"}]}`
	exampleDoc      = `{"model":"gpt-4o","messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello! How can I help?"},{"role":"user","content":"Name three primes."}]}`
	exampleFrame    = `23 4d 32 4d 7c 31 7c 21 00 01 00 00 00 00 02 00
		00 00 00 00 00 00 00 00 00 00 00 06 67 70 74 2d
		34 6f 00 00 03 02 01 03 2c 00 00 00 c4 1e f7 42
		20 a5 3d 01 00 74 01 2c 4e 61 6d 65 20 74 68 72
		65 65 20 70 72 69 6d 65 73 2e 22 7d 5d 7d 04 00
		5d 6b c2 56 0d 1a b1 f3 62 20 ad 20`
	// exampleFrameFull is the same delta with its routing fields filled
	// (msg_count 3, roles 19, content_hint 42), as writers before the rule
	// that a delta leaves them empty wrote it: readers accept both.
	exampleFrameFull = `23 4d 32 4d 7c 31 7c 22 00 01 00 00 00 00 02 00
		00 00 00 00 00 00 00 00 00 00 00 06 67 70 74 2d
		34 6f 03 19 2a 03 02 01 03 2c 00 00 00 c4 1e f7
		42 20 a5 3d 01 00 74 01 2c 4e 61 6d 65 20 74 68
		72 65 65 20 70 72 69 6d 65 73 2e 22 7d 5d 7d 04
		00 5d 6b c2 56 0d 1a b1 f3 62 20 ad 20`
	// exampleFrameWithCost is the same frame with est_cost_usd (c1 a8 a4
	// 3b) after content_hint, as writers before the rule that a delta
	// omits it wrote it: readers accept both.
	exampleFrameWithCost = `23 4d 32 4d 7c 31 7c 26 00 01 00 00 00 00 02 00
		00 00 00 00 00 00 00 00 00 00 00 06 67 70 74 2d
		34 6f 03 19 2a c1 a8 a4 3b 03 02 01 03 2c 00 00
		00 c4 1e f7 42 20 a5 3d 01 00 74 01 2c 4e 61 6d
		65 20 74 68 72 65 65 20 70 72 69 6d 65 73 2e 22
		7d 5d 7d 04 00 5d 6b c2 56 0d 1a b1 f3 62 20 ad
		20`
)

func TestProtocolExample(t *testing.T) {
	base := NewBase([]byte(exampleRequest), []byte(exampleResponse))
	for i, hx := range []string{exampleFrame, exampleFrameFull, exampleFrameWithCost} {
		fr := testkit.Unhex(t, hx)
		doc, err := AppendDecodeFrame(nil, fr, base, frame.Limits{})
		if err != nil || string(doc) != exampleDoc {
			t.Fatalf("frame %d: decoded %q, %v", i, doc, err)
		}
		var h frame.Header
		if err := frame.ReadHeader(fr, &h); err != nil || h.Ext != (frame.Extension{DocID: 2, BaseID: 1, Delta: true}) || h.PayloadLen != 44 ||
			h.HasEstCost != (i == 2) || (h.ContentHint == 42) != (i > 0) || (h.MsgCount == 3) != (i > 0) {
			t.Fatalf("frame %d: header %+v, %v", i, h, err)
		}
		if i > 0 {
			continue
		}
		// The Go encoder writes exactly these bytes (the zstd level is
		// the writer's choice; this pins ours).
		again, isDelta, err := AppendEncodeFrame(nil, []byte(exampleDoc), frame.Extension{DocID: 2, BaseID: 1}, base, frame.Limits{})
		if err != nil || !isDelta || !bytes.Equal(again, fr) {
			t.Fatalf("encoded %x, delta %v, %v", again, isDelta, err)
		}
	}
}

// Pooled encoders and decoders run no goroutines of their own.
func TestNoGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	base, doc, _ := corpusTurn(t)
	for range 20 {
		p, err := AppendEncode(nil, doc, base)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := AppendDecode(nil, p, base, frame.Limits{}); err != nil {
			t.Fatal(err)
		}
	}
	if after := runtime.NumGoroutine(); after > before {
		t.Fatalf("%d goroutines before, %d after", before, after)
	}
}

// Documents of every small size, compressible or not, round-trip: the
// encoder's blocks stay within what the decoder accepts (Block_Maximum_Size
// is the content size for a small single-segment frame).
func TestSmallDocuments(t *testing.T) {
	base := NewBase([]byte(exampleRequest), []byte(exampleResponse))
	rnd := rand.New(rand.NewPCG(1, 2))
	for n := 1; n <= 600; n++ {
		for _, doc := range [][]byte{
			[]byte(strings.Repeat("a", n)),
			func() []byte {
				b := make([]byte, n)
				for i := range b {
					b[i] = byte(rnd.Uint32())
				}
				return b
			}(),
			[]byte(exampleDoc)[:min(n, len(exampleDoc))],
		} {
			p, err := AppendEncode(nil, doc, base)
			if err != nil {
				t.Fatal(err)
			}
			back, err := AppendDecode(nil, p, base, frame.Limits{})
			if err != nil || !bytes.Equal(back, doc) {
				t.Fatalf("%d bytes (%.10q…): %v", len(doc), doc, err)
			}
		}
	}
}
