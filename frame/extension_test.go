package frame

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"strings"
	"testing"

	"github.com/m2md/m2md/internal/testkit"
)

// frameARouting is frame A's routing header (wire reference §3.6): model
// "gpt-4o", one message (user), content hint 2, the cost estimate.
const frameARouting = `06 67 70 74 2d 34 6f 01 01 02 0a d7 a3 3b`

// The docs/protocol.md §4.3 examples, byte for byte.
const (
	// frameA with doc_id 300 and base_id 7 (flags 02: BASE).
	frameAExtHex = `23 4d 32 4d 7c 31 7c 27 00 01 00 00 00 00 02 00
		00 00 00 00 00 00 00 00 00 00 00 06 67 70 74 2d
		34 6f 01 01 02 0a d7 a3 3b 02 ac 02 07 04 3e 00
		00 00 6e 60 55 a4 7b 22 6d 6f 64 65 6c 22 3a 22
		67 70 74 2d 34 6f 22 2c 22 6d 65 73 73 61 67 65
		73 22 3a 5b 7b 22 72 6f 6c 65 22 3a 22 75 73 65
		72 22 2c 22 63 6f 6e 74 65 6e 74 22 3a 22 48 69
		22 7d 5d 7d`
	// frameA's document as a delta 01 02 03, doc_id 301 against base 300
	// (flags 03: DELTA|BASE); COMPRESSED clear, crc32 the document's, the
	// routing fields of a delta: the model, msg_count 0, no roles,
	// content_hint 0 and no est_cost_usd.
	frameADeltaHex = `23 4d 32 4d 7c 31 7c 23 00 01 00 00 00 00 02 00
		00 00 00 00 00 00 00 00 00 00 00 06 67 70 74 2d
		34 6f 00 00 03 ad 02 ac 02 05 03
		00 00 00 6e 60 55 a4 01 02 03`
)

func TestEncodeExtensionBytes(t *testing.T) {
	doc := []byte(frameAJSON)
	got, err := AppendEncodeExt(nil, doc, Extension{DocID: 300, BaseID: 7}, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if want := unhex(t, frameAExtHex); !bytes.Equal(got, want) {
		t.Fatalf("AppendEncodeExt:\n got %x\nwant %x", got, want)
	}
	back, err := AppendDecode(nil, got, Limits{})
	if err != nil || string(back) != frameAJSON {
		t.Fatalf("AppendDecode: %q, %v", back, err)
	}

	got, err = AppendEncodeDelta(nil, doc, []byte{1, 2, 3}, Extension{DocID: 301, BaseID: 300}, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if want := unhex(t, frameADeltaHex); !bytes.Equal(got, want) {
		t.Fatalf("AppendEncodeDelta:\n got %x\nwant %x", got, want)
	}
	if _, err := AppendDecode(nil, got, Limits{}); !errors.Is(err, ErrDelta) || !strings.Contains(err.Error(), "doc_id 301 against base 300") {
		t.Fatalf("AppendDecode of a delta: %v, want ErrDelta naming doc_id and base", err)
	}

	// A long document is Brotli-compressed as usual; its delta never is.
	long := testkit.CorpusFile(t, "req-long-100k-01.json")
	full, err := AppendEncodeExt(nil, long, Extension{DocID: 1}, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	h := mustReadHeader(t, full)
	if !h.Flags.Compressed() || !h.Flags.HasExtensions() || h.Ext != (Extension{DocID: 1}) || h.ExtLen != 3 {
		t.Fatalf("header %+v", h)
	}
	if back, err := AppendDecode(nil, full, Limits{}); err != nil || !bytes.Equal(back, long) {
		t.Fatalf("AppendDecode: %d bytes, %v", len(back), err)
	}
	d, err := AppendEncodeDelta(nil, long, []byte("delta"), Extension{DocID: 2, BaseID: 1}, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	h = mustReadHeader(t, d)
	if h.Flags.Compressed() || h.PayloadLen != 5 || h.CRC != crc32.ChecksumIEEE(long) || !h.Ext.Delta {
		t.Fatalf("delta header %+v", h)
	}
}

func TestEncodeExtensionRefused(t *testing.T) {
	doc := []byte(frameAJSON)
	for _, tc := range []struct {
		name string
		ext  Extension
		doc  string
		want error
	}{
		{"doc_id 0", Extension{BaseID: 3}, frameAJSON, ErrMalformed},
		{"delta via AppendEncodeExt", Extension{DocID: 2, BaseID: 1, Delta: true}, frameAJSON, ErrMalformed},
		{"response", Extension{DocID: 1}, `{"id":"chatcmpl-1","choices":[]}`, ErrSchema},
	} {
		if _, err := AppendEncodeExt(nil, []byte(tc.doc), tc.ext, Limits{}); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if _, err := AppendEncodeDelta(nil, doc, []byte{1}, Extension{DocID: 2}, Limits{}); !errors.Is(err, ErrMalformed) {
		t.Errorf("delta without base: %v", err)
	}
}

func TestReadExtension(t *testing.T) {
	payload := []byte(frameAJSON)
	crc := crc32.ChecksumIEEE(payload)
	routing := unhex(t, frameARouting)
	build := func(schema Schema, flags Flags, block string) []byte {
		v := append(append([]byte{}, routing...), unhex(t, block)...)
		return assemble(schema, SecurityNone, flags, v, payload, crc)
	}
	ok := []struct {
		block string
		want  Extension
	}{
		{`00 01 02`, Extension{DocID: 1}},
		{`02 ac 02 07 04`, Extension{DocID: 300, BaseID: 7}},
		{`03 7f 80 01 04`, Extension{DocID: 127, BaseID: 128, Delta: true}},
		{`02 ff ff ff ff ff ff ff ff ff 01 ff ff ff ff ff ff ff ff ff 01 15`, Extension{DocID: ^uint64(0), BaseID: ^uint64(0)}},
	}
	for _, tc := range ok {
		var h Header
		if err := ReadHeader(build(SchemaRequest, FlagHasExtensions, tc.block), &h); err != nil {
			t.Errorf("%s: %v", tc.block, err)
			continue
		}
		if h.Ext != tc.want || h.ExtLen != len(unhex(t, tc.block)) || string(h.Model) != "gpt-4o" ||
			h.MsgCount != 1 || !h.HasEstCost || h.RoutingMisaligned {
			t.Errorf("%s: header %+v", tc.block, h)
		}
	}

	bad := []struct {
		name   string
		schema Schema
		block  string
	}{
		{"L 0", SchemaRequest, `00`},
		{"L 1", SchemaRequest, `00 01`},
		{"L 22", SchemaRequest, `02 ff ff ff ff ff ff ff ff ff 01 ff ff ff ff ff ff ff ff ff 01 00 16`},
		{"L past the header", SchemaRequest, `02 01 14`},
		{"unknown flag bit", SchemaRequest, `04 01 02`},
		{"DELTA without BASE", SchemaRequest, `01 01 02`},
		{"doc_id 0", SchemaRequest, `00 00 02`},
		{"doc_id not minimal", SchemaRequest, `00 81 00 03`},
		{"doc_id truncated", SchemaRequest, `00 80 02`},
		{"doc_id 11 bytes", SchemaRequest, `00 ff ff ff ff ff ff ff ff ff ff 01 0c`},
		{"doc_id over 64 bits", SchemaRequest, `00 ff ff ff ff ff ff ff ff ff 02 0b`},
		{"base_id missing", SchemaRequest, `02 01 02`},
		{"base_id 0", SchemaRequest, `02 01 00 03`},
		{"base_id not minimal", SchemaRequest, `02 01 85 00 04`},
		{"bytes after the fields", SchemaRequest, `00 01 09 03`},
		{"schema 02", SchemaResponse, `00 01 02`},
		{"schema 04", SchemaEmbeddingRequest, `00 01 02`},
	}
	for _, tc := range bad {
		var h Header
		fr := build(tc.schema, FlagHasExtensions, tc.block)
		if err := ReadHeader(fr, &h); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: ReadHeader %v, want ErrMalformed", tc.name, err)
		}
		if _, err := AppendDecode(nil, fr, Limits{}); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: AppendDecode %v, want ErrMalformed", tc.name, err)
		}
	}
	// The block must start where the routing fields end: not inside the
	// cost estimate, not after a gap.
	short := append(append([]byte{}, routing[:len(routing)-1]...), 0, 1, 2)
	gap := append(append([]byte{}, routing...), 0xee, 0, 1, 2)
	for _, v := range [][]byte{short, gap} {
		if err := ReadHeader(assemble(SchemaRequest, SecurityNone, FlagHasExtensions, v, payload, crc), new(Header)); !errors.Is(err, ErrMalformed) {
			t.Errorf("routing fields %x: %v, want ErrMalformed", v, err)
		}
	}
	// A block whose L counts the whole variable header runs past it by
	// its length byte.
	if err := ReadHeader(assemble(SchemaRequest, SecurityNone, FlagHasExtensions, unhex(t, `00 01 03`), payload, crc), new(Header)); !errors.Is(err, ErrMalformed) {
		t.Errorf("L the whole variable header: %v", err)
	}
	// The error says how many bytes follow the fields.
	if err := ReadHeader(build(SchemaRequest, FlagHasExtensions, `00 01 09 09 04`), new(Header)); err == nil || !strings.Contains(err.Error(), "2 bytes after its fields") {
		t.Errorf("bytes after the fields: %v", err)
	}
	// A variable header that is the block alone has no routing fields.
	if err := ReadHeader(assemble(SchemaRequest, SecurityNone, FlagHasExtensions, unhex(t, `00 01 02`), payload, crc), new(Header)); !errors.Is(err, ErrMalformed) {
		t.Errorf("block without routing fields: %v", err)
	}
	// Without HAS_EXTENSIONS the same bytes are no block: the routing
	// header is misaligned, which is advisory, and there is no extension.
	h := mustReadHeader(t, build(SchemaRequest, 0, `00 01 02`))
	if h.Ext.Present() || h.ExtLen != 0 || !h.RoutingMisaligned {
		t.Errorf("without the flag: %+v", h)
	}
}

func TestStripExtension(t *testing.T) {
	plain := mustEncode(t, frameAJSON)
	withExt := unhex(t, frameAExtHex)
	got, err := StripExtension(withExt)
	if err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("StripExtension: %x, %v\nwant %x", got, err, plain)
	}
	// Without a block: unchanged.
	if got, err := StripExtension(plain); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("no block: %x, %v", got, err)
	}
	if _, err := StripExtension(unhex(t, frameADeltaHex)); !errors.Is(err, ErrDelta) {
		t.Fatalf("delta: %v, want ErrDelta", err)
	}
	if _, err := StripExtension([]byte("#M2M|1|")); !errors.Is(err, ErrTruncated) {
		t.Fatalf("short: %v", err)
	}
}

func TestReadExtensionAllocations(t *testing.T) {
	fr := unhex(t, frameADeltaHex)
	var h Header
	if n := testing.AllocsPerRun(50, func() {
		if err := ReadHeader(fr, &h); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("ReadHeader: %v allocations", n)
	}
}

// replyJSON is a final chat response with usage (so its header carries the
// cost estimate, the field right before a reply delta's block).
const replyJSON = `{"id":"chatcmpl-abc123","object":"chat.completion","created":1705520400,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"The answer is 4."},"finish_reason":"stop"}],"usage":{"prompt_tokens":50,"completion_tokens":10,"total_tokens":60}}`

// TestReplyDeltaBytes: a reply delta is a response frame with
// HAS_EXTENSIONS and no other flag, empty response fields (id and model
// empty, finish_reason ff, no tokens: the requester rebuilds the response
// they would describe), the block 01 01, COMPRESSED clear, the response's
// CRC-32 and the delta as payload (docs/protocol.md §4.3, "Reply deltas").
func TestReplyDeltaBytes(t *testing.T) {
	doc := []byte(replyJSON)
	delta := []byte{0x20, 0xa5, 1, 2, 3}
	got, err := AppendEncodeReplyDelta(nil, doc, delta, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	want := []byte(Prefix)
	want = binary.LittleEndian.AppendUint16(want, FixedHeaderLen+7)
	want = append(want, byte(SchemaResponse), byte(SecurityNone), 0, 0, 0, byte(FlagHasExtensions>>24))
	want = append(want, make([]byte, ReservedLen)...)
	want = append(want, 0, 0, 0xff, 0, 0, 0x01, 0x01)
	want = binary.LittleEndian.AppendUint32(want, uint32(len(delta)))
	want = binary.LittleEndian.AppendUint32(want, crc32.ChecksumIEEE(doc))
	want = append(want, delta...)
	if !bytes.Equal(got, want) {
		t.Fatalf("AppendEncodeReplyDelta:\n got %x\nwant %x", got, want)
	}
	h := mustReadHeader(t, got)
	if h.Schema != SchemaResponse || h.Ext != (Extension{Delta: true}) || !h.Ext.Present() || h.ExtLen != 2 ||
		len(h.ID) != 0 || h.HasEstCost || h.PromptTokens != 0 || h.FinishReason != FinishUnknown ||
		h.PayloadLen != uint32(len(delta)) || h.CRC != crc32.ChecksumIEEE(doc) {
		t.Fatalf("header %+v", h)
	}
	if _, err := AppendDecode(nil, got, Limits{}); !errors.Is(err, ErrDelta) || !strings.Contains(err.Error(), "reply delta") {
		t.Fatalf("AppendDecode of a reply delta: %v, want ErrDelta saying it is a reply delta", err)
	}
	if _, err := StripExtension(got); !errors.Is(err, ErrDelta) {
		t.Fatalf("StripExtension of a reply delta: %v, want ErrDelta", err)
	}
	// A reader takes a reply delta whose fields are filled, as writers
	// before the empty-field rule wrote them: with the cost estimate
	// right before the block.
	plain := mustEncode(t, replyJSON)
	ph := mustReadHeader(t, plain)
	full := append([]byte{}, plain[:ph.PayloadOffset()]...)
	full = append(full, 0x01, 0x01)
	binary.LittleEndian.PutUint16(full[OffHeaderLen:], uint16(ph.HeaderLen+2))
	binary.LittleEndian.PutUint32(full[OffFlags:], uint32(ph.Flags&^FlagCompressed|FlagHasExtensions))
	full = binary.LittleEndian.AppendUint32(full, uint32(len(delta)))
	full = binary.LittleEndian.AppendUint32(full, crc32.ChecksumIEEE(doc))
	full = append(full, delta...)
	if h := mustReadHeader(t, full); h.Ext != (Extension{Delta: true}) || string(h.ID) != "chatcmpl-abc123" || !h.HasEstCost || h.EstCost != ph.EstCost {
		t.Fatalf("header of a filled reply delta %+v", h)
	}
	// Only a chat response carries one.
	for _, doc := range []string{frameAJSON, `{"object":"list","data":[]}`} {
		if _, err := AppendEncodeReplyDelta(nil, []byte(doc), delta, Limits{}); !errors.Is(err, ErrSchema) {
			t.Errorf("%s: %v, want ErrSchema", doc, err)
		}
	}
}

// TestReadReplyExtension: the strict rules of a response's block.
func TestReadReplyExtension(t *testing.T) {
	doc := []byte(replyJSON)
	crc := crc32.ChecksumIEEE(doc)
	ph := mustReadHeader(t, mustEncode(t, replyJSON))
	plain := mustEncode(t, replyJSON)
	fields := plain[OffVarHeader:ph.PayloadOffset()] // id, model, finish, counts, cost
	build := func(schema Schema, flags Flags, v []byte) []byte {
		return assemble(schema, SecurityNone, flags|ph.Flags&^FlagCompressed, v, []byte{1, 2, 3}, crc)
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	if h := mustReadHeader(t, build(SchemaResponse, FlagHasExtensions, cat(fields, []byte{1, 1}))); h.Ext != (Extension{Delta: true}) || h.ExtLen != 2 {
		t.Fatalf("valid block read as %+v, %d bytes", h.Ext, h.ExtLen)
	}
	bad := []struct {
		name   string
		schema Schema
		v      []byte
	}{
		{"flags 00", SchemaResponse, cat(fields, []byte{0, 1})},
		{"flags 03", SchemaResponse, cat(fields, []byte{3, 1})},
		{"flags 02", SchemaResponse, cat(fields, []byte{2, 1})},
		{"L 2", SchemaResponse, cat(fields, []byte{1, 0, 2})},
		{"L 0", SchemaResponse, cat(fields, []byte{1, 0})},
		{"a request's block", SchemaResponse, cat(fields, []byte{0, 1, 2})},
		{"block alone", SchemaResponse, []byte{1, 1}},
		{"a byte before the block", SchemaResponse, cat(fields, []byte{0xee, 1, 1})},
		{"block inside the cost", SchemaResponse, cat(fields[:len(fields)-1], []byte{1, 1})},
		{"schema 03", SchemaStream, cat(fields, []byte{1, 1})},
		{"schema 05", SchemaEmbeddingResponse, cat(fields, []byte{1, 1})},
		{"schema 10", SchemaError, cat(fields, []byte{1, 1})},
	}
	for _, tc := range bad {
		fr := build(tc.schema, FlagHasExtensions, tc.v)
		if err := ReadHeader(fr, new(Header)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: ReadHeader %v, want ErrMalformed", tc.name, err)
		}
	}
	// Without the cost estimate's flag the four cost bytes are no field:
	// a block after them does not follow the fields.
	noCost := assemble(SchemaResponse, SecurityNone, FlagHasExtensions, cat(fields, []byte{1, 1}), []byte{1}, crc)
	if err := ReadHeader(noCost, new(Header)); !errors.Is(err, ErrMalformed) {
		t.Errorf("fields then 4 stray bytes then the block: %v, want ErrMalformed", err)
	}
}
