package frame

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"runtime"
	"strings"
	"testing"

	"github.com/andybalholm/brotli"

	"github.com/m2md/m2md/internal/testkit"
)

const frameAJSON = `{"model":"gpt-4o","messages":[{"role":"user","content":"Hi"}]}`

// assemble builds a binary frame from parts, for inputs no encoder writes.
func assemble(schema Schema, security Security, flags Flags, varHeader, payload []byte, crc uint32) []byte {
	f := append([]byte(Prefix), make([]byte, FixedHeaderLen)...)
	binary.LittleEndian.PutUint16(f[OffHeaderLen:], uint16(FixedHeaderLen+len(varHeader)))
	f[OffSchema], f[OffSecurity] = byte(schema), byte(security)
	binary.LittleEndian.PutUint32(f[OffFlags:], uint32(flags))
	f = append(f, varHeader...)
	f = binary.LittleEndian.AppendUint32(f, uint32(len(payload)))
	f = binary.LittleEndian.AppendUint32(f, crc)
	return append(f, payload...)
}

func brotliOf(t testing.TB, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := brotli.NewWriterOptions(&buf, brotli.WriterOptions{Quality: 5, LGWin: 22})
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// The wire reference §4.1 HMAC vector: the plain decoder ignores the tag.
func TestDecodeHMACFrame(t *testing.T) {
	text := []byte("#M2M|1|IgABAQAAAAAAAAAAAAAAAAAAAAAGZ3B0LTRvAQECCtejOz4AAABuYFWkeyJtb2RlbCI6ImdwdC00byIsIm1lc3NhZ2VzIjpbeyJyb2xlIjoidXNlciIsImNvbnRlbnQiOiJIaSJ9XX32hBjyzhkGGaLEzPY18OnpwGUaO7vGYnA32mMOFrxmcg==")
	got, err := decodeText(nil, text, Limits{})
	if err != nil || string(got) != frameAJSON {
		t.Fatalf("got %q, %v", got, err)
	}
	var h Header
	if err := ReadTextHeader(text, &h); err != nil {
		t.Fatal(err)
	}
	if h.Security != SecurityHMAC || !h.PayloadKnown || h.PayloadLen != 62 || string(h.Model) != "gpt-4o" {
		t.Fatalf("header %+v", h)
	}
}

// The wire reference §4.2 AEAD vector: headers readable, payload refused.
func TestAEADFrame(t *testing.T) {
	frame := unhex(t, `23 4d 32 4d 7c 31 7c 22 00 01 02 00 00 00 00 00
		00 00 00 00 00 00 00 00 00 00 00 06 67 70 74 2d
		34 6f 01 01 02 0a d7 a3 3b 01 02 03 04 05 06 07
		08 09 0a 0b 0c 80 11 93 f7 21 28 a7 34 df c7 94
		80 11 63 bb d2 ff 70 b2 4f bb 46 29 e8 02 2e a9
		2e 01 f0 be 5c fa de c8 57 05 67 9e bb 54 93 dd
		02 c5 8c 8f 41 bc c9 c5 df b8 c7 2e 2a 9d 33 55
		c3 4f 4b 13 58 17 0c d1 08 08 1a 5f d5 24 7a c5
		09 77 c2 f4 85 0d 7d 1e 09 2e 59`)
	h := mustReadHeader(t, frame)
	if h.Security != SecurityAEAD || h.PayloadKnown || h.PayloadLen != 0 || string(h.Model) != "gpt-4o" ||
		h.MsgCount != 1 || h.ContentHint != 2 || !h.HasEstCost || h.PayloadOffset() != 41 {
		t.Fatalf("header %+v", h)
	}
	if _, err := AppendDecode(nil, frame, Limits{}); !errors.Is(err, ErrEncrypted) {
		t.Fatalf("AppendDecode: %v, want ErrEncrypted", err)
	}
	// Less than nonce + tag after the header: truncated.
	if err := ReadHeader(frame[:PrefixLen+0x22+27], &h); !errors.Is(err, ErrTruncated) {
		t.Fatalf("short AEAD frame: %v, want ErrTruncated", err)
	}
}

func TestSequence(t *testing.T) {
	bin := mustEncode(t, frameAJSON)
	if seq, ch, err := Sequence(bin); err != nil || seq != 0 || ch != 0 {
		t.Fatalf("fresh frame: %d %d %v", seq, ch, err)
	}
	if err := SetSequence(bin, 0x0102030405060708, 0xa0b0c0d0); err != nil {
		t.Fatal(err)
	}
	if got := bin[15:27]; !bytes.Equal(got, unhex(t, "08 07 06 05 04 03 02 01 d0 c0 b0 a0")) {
		t.Fatalf("reserved bytes % x", got)
	}
	h := mustReadHeader(t, bin)
	if h.Sequence != 0x0102030405060708 || h.Channel != 0xa0b0c0d0 {
		t.Fatalf("header sequence %x channel %x", h.Sequence, h.Channel)
	}
	if got, err := AppendDecode(nil, bin, Limits{}); err != nil || string(got) != frameAJSON {
		t.Fatalf("decode after SetSequence: %v", err)
	}
	if err := SetSequence(bin[:20], 1, 1); !errors.Is(err, ErrTruncated) {
		t.Fatalf("short frame: %v", err)
	}
	if _, _, err := Sequence([]byte("#TK|C|abc")); !errors.Is(err, ErrBadPrefix) {
		t.Fatalf("wrong prefix: %v", err)
	}
}

func TestDecodeErrors(t *testing.T) {
	good := mustEncode(t, frameAJSON)
	json := []byte(frameAJSON)
	crc := crc32.ChecksumIEEE(json)
	routing := good[OffVarHeader : PrefixLen+34]
	corrupt := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	tests := []struct {
		name  string
		frame []byte
		want  error
	}{
		{"bad crc", corrupt(func(b []byte) []byte { b[45] ^= 1; return b }), ErrChecksum},
		{"payload byte flipped", corrupt(func(b []byte) []byte { b[60] ^= 0x20; return b }), ErrChecksum},
		{"header_len 19", corrupt(func(b []byte) []byte { b[7] = 19; return b }), ErrMalformed},
		{"header_len past end", corrupt(func(b []byte) []byte { b[7], b[8] = 0xff, 0xff; return b }), ErrTruncated},
		{"payload_len past end", corrupt(func(b []byte) []byte { b[41]++; return b }), ErrTruncated},
		{"no payload_len", good[:PrefixLen+34+3], ErrTruncated},
		{"payload cut", good[:len(good)-1], ErrTruncated},
		{"model past header", corrupt(func(b []byte) []byte { b[27] = 40; return b }), ErrMalformed},
		{"model not UTF-8", corrupt(func(b []byte) []byte { b[28] = 0xff; return b }), ErrMalformed},
		{"not UTF-8", assemble(SchemaRequest, SecurityNone, 0, routing, []byte("\xff"), crc32.ChecksumIEEE([]byte("\xff"))), ErrMalformed},
		{"not JSON", assemble(SchemaRequest, SecurityNone, 0, routing, []byte("hello"), crc32.ChecksumIEEE([]byte("hello"))), ErrInvalidJSON},
		{"corrupt brotli", assemble(SchemaRequest, SecurityNone, FlagCompressed, routing, []byte("not brotli at all"), crc), ErrMalformed},
		{"truncated brotli", assemble(SchemaRequest, SecurityNone, FlagCompressed, routing, brotliOf(t, json)[:20], crc), ErrMalformed},
		{"brotli plus garbage", assemble(SchemaRequest, SecurityNone, FlagCompressed, routing, append(brotliOf(t, json), 1, 2, 3), crc), ErrMalformed},
		{"response id past header", assemble(SchemaResponse, SecurityNone, 0, []byte{5, 'a'}, json, crc), ErrMalformed},
		{"response no finish", assemble(SchemaResponse, SecurityNone, 0, []byte{0, 0}, json, crc), ErrMalformed},
		{"response varint cut", assemble(SchemaResponse, SecurityNone, 0, []byte{0, 0, 0, 0x80}, json, crc), ErrMalformed},
		{"response varint 11 bytes", assemble(SchemaResponse, SecurityNone, 0, append([]byte{0, 0, 0}, bytes.Repeat([]byte{0xff}, 11)...), json, crc), ErrMalformed},
		{"response cached missing", assemble(SchemaResponse, SecurityNone, flagHasCachedTokens, []byte{0, 0, 0, 1, 1}, json, crc), ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := []byte("keep")
			out, err := AppendDecode(dst, tt.frame, Limits{})
			if !errors.Is(err, tt.want) {
				t.Fatalf("AppendDecode: %v, want %v", err, tt.want)
			}
			if string(out) != "keep" {
				t.Fatalf("dst changed to %q on error", out)
			}
			text := append([]byte(Prefix), b64.EncodeToString(tt.frame[PrefixLen:])...)
			if _, err := decodeText(nil, text, Limits{}); !errors.Is(err, tt.want) {
				t.Fatalf("decodeText: %v, want %v", err, tt.want)
			}
		})
	}
}

// Schemas without a variable header, and unknown security bytes, decode.
func TestDecodeOtherSchemas(t *testing.T) {
	json := []byte(`{"a":1}`)
	for _, schema := range []Schema{SchemaStream, SchemaCustom, SchemaUnknown, 0x42} {
		f := assemble(schema, Security(0x07), 0, []byte{1, 2, 3}, json, crc32.ChecksumIEEE(json))
		got, err := AppendDecode(nil, f, Limits{})
		if err != nil || string(got) != string(json) {
			t.Errorf("schema %#x: %q, %v", schema, got, err)
		}
		h := mustReadHeader(t, f)
		if h.Model != nil || h.HeaderLen != 23 || !h.PayloadKnown {
			t.Errorf("schema %#x: header %+v", schema, h)
		}
	}
}

func TestTextErrors(t *testing.T) {
	good := string(mustEncodeText(t, frameAJSON))
	tests := []struct {
		name, text string
		want       error
	}{
		{"line break", good[:20] + "\n" + good[20:], ErrMalformed},
		{"carriage return", good[:20] + "\r" + good[20:], ErrMalformed},
		{"not base64", good[:20] + "!" + good[21:], ErrMalformed},
		{"padding missing", strings.TrimRight(good, "="), ErrMalformed},
		{"padding inside", good[:12] + "=" + good[13:], ErrMalformed},
		{"space", good + " ", ErrMalformed},
		{"binary prefix only", "#M2M|1", ErrBadPrefix},
		{"brotli prefix", "#M2M[v3.0]|DATA:AAAA", ErrBadPrefix},
	}
	for _, tt := range tests {
		if _, err := decodeText(nil, []byte(tt.text), Limits{}); !errors.Is(err, tt.want) {
			t.Errorf("%s: decodeText: %v, want %v", tt.name, err, tt.want)
		}
	}
	// Non-zero trailing bits: canonical Base64 only. "...fQ==" decodes the
	// same as "...fR==" in a lenient decoder.
	if !strings.HasSuffix(good, "XX0=") {
		t.Fatalf("unexpected text frame ending %q", good[len(good)-4:])
	}
	if _, err := decodeText(nil, []byte(good[:len(good)-2]+"1="), Limits{}); !errors.Is(err, ErrMalformed) {
		t.Errorf("non-canonical Base64: %v", err)
	}
}

func TestReadTextHeaderOnlyDecodesHeader(t *testing.T) {
	good := mustEncodeText(t, frameAJSON)
	// Change the payload only (valid Base64, other bytes): the header is
	// still readable, the frame is not decodable (its CRC fails).
	bad := bytes.Clone(good)
	if bad[len(bad)-10] == 'A' {
		bad[len(bad)-10] = 'B'
	} else {
		bad[len(bad)-10] = 'A'
	}
	var h Header
	if err := ReadTextHeader(bad, &h); err != nil || string(h.Model) != "gpt-4o" || h.PayloadLen != 62 {
		t.Fatalf("ReadTextHeader: %v, %+v", err, h)
	}
	if _, err := decodeText(nil, bad, Limits{}); err == nil {
		t.Fatal("decodeText decoded a frame with a changed payload")
	}
	// Invalid Base64 in the payload is refused by both readers alike.
	bad[len(bad)-10] = '!'
	if err := ReadTextHeader(bad, &h); !errors.Is(err, ErrMalformed) {
		t.Fatalf("ReadTextHeader with '!' in the payload's Base64: %v", err)
	}
	if _, err := decodeText(nil, bad, Limits{}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("decodeText: %v", err)
	}
	// A text frame shorter than its payload_len says.
	if err := ReadTextHeader(good[:len(good)-8], &h); !errors.Is(err, ErrTruncated) {
		t.Fatalf("cut text frame: %v", err)
	}
	if err := ReadTextHeader(good[:len(good)-1], &h); !errors.Is(err, ErrMalformed) {
		t.Fatalf("unpadded text frame: %v", err)
	}
}

func TestLimits(t *testing.T) {
	deep := strings.Repeat("[", 33) + strings.Repeat("]", 33)
	long := `{"a":"` + strings.Repeat("x", 2000) + `"}`
	wide := "[" + strings.TrimSuffix(strings.Repeat("1,", 10_001), ",") + "]"
	for _, tt := range []struct {
		name string
		json string
		lim  Limits
	}{
		{"depth 33", deep, Limits{}},
		{"depth 5 of 4", "[[[[[]]]]]", Limits{MaxDepth: 4}},
		{"string 2000 of 1000", long, Limits{MaxString: 1000}},
		{"array 10001", wide, Limits{}},
		{"document over MaxDecompressed", long, Limits{MaxDecompressed: 1000}},
		{"frame over MaxMessage", long, Limits{MaxMessage: 50}},
	} {
		if _, err := AppendEncode(nil, []byte(tt.json), tt.lim); !errors.Is(err, ErrLimit) {
			t.Errorf("%s: AppendEncode: %v, want ErrLimit", tt.name, err)
		}
		if _, err := AppendEncodeText(nil, []byte(tt.json), tt.lim); !errors.Is(err, ErrLimit) {
			t.Errorf("%s: AppendEncodeText: %v, want ErrLimit", tt.name, err)
		}
		// A frame carrying it (built without limits) is refused by decoders.
		payload := []byte(tt.json)
		f := assemble(SchemaCustom, SecurityNone, 0, nil, payload, crc32.ChecksumIEEE(payload))
		if _, err := AppendDecode(nil, f, tt.lim); !errors.Is(err, ErrLimit) {
			t.Errorf("%s: AppendDecode: %v, want ErrLimit", tt.name, err)
		}
		cf := assemble(SchemaCustom, SecurityNone, FlagCompressed, nil, brotliOf(t, payload), crc32.ChecksumIEEE(payload))
		if _, err := AppendDecode(nil, cf, tt.lim); !errors.Is(err, ErrLimit) {
			t.Errorf("%s: AppendDecode compressed: %v, want ErrLimit", tt.name, err)
		}
	}
	if _, err := AppendEncode(nil, []byte(`{"a":1`), Limits{}); !errors.Is(err, ErrInvalidJSON) {
		t.Errorf("invalid JSON: %v", err)
	}
}

func TestFieldTooLong(t *testing.T) {
	m255 := strings.Repeat("m", 255)
	if _, err := AppendEncode(nil, []byte(`{"model":"`+m255+`","messages":[]}`), Limits{}); err != nil {
		t.Fatalf("255-byte model: %v", err)
	}
	for _, json := range []string{
		`{"model":"` + m255 + `x","messages":[]}`,
		`{"model":"` + strings.Repeat("é", 128) + `","messages":[]}`,      // 256 bytes
		`{"model":"` + strings.Repeat(`\u00e9`, 128) + `","messages":[]}`, // decoded length counts
		`{"id":"chatcmpl-` + m255 + `","choices":[]}`,                     // response id
		`{"id":"chatcmpl-1","model":"` + m255 + `x","choices":[]}`,        // response model
	} {
		if _, err := AppendEncode(nil, []byte(json), Limits{}); !errors.Is(err, ErrFieldTooLong) {
			t.Errorf("%.50q: %v, want ErrFieldTooLong", json, err)
		}
	}
}

// A request whose messages include roles the encoder skips (function, no
// role): the Rust layout makes the decoder misread everything after
// msg_count. The frame must still decode, and the header reader must say
// which fields it could not place.
func TestUnknownRolesStillDecode(t *testing.T) {
	json := `{"model":"gpt-4o","messages":[{"role":"function","content":"a"},{"role":"function"},{"content":"b"},{"role":"function"},{"role":"x"},{"role":"user","content":"hello"}],"max_tokens":5}`
	bin := mustEncode(t, json)
	checkRoundTrip(t, json, bin, mustEncodeText(t, json))
	h := mustReadHeader(t, bin)
	if string(h.Model) != "gpt-4o" || h.MsgCount != 6 {
		t.Fatalf("header %+v", h)
	}
	if !h.RoutingMisaligned || h.HasEstCost || h.HasMaxTokens || h.Roles != nil || h.ContentHint != 0 {
		t.Fatalf("expected the fields after msg_count to be reported missing: %+v", h)
	}

	// max_tokens present but not an integer: the flag stays, the varint is
	// omitted (as in Rust), and the decoder cannot place the cost.
	json = `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":null}`
	bin = mustEncode(t, json)
	checkRoundTrip(t, json, bin, mustEncodeText(t, json))
	h = mustReadHeader(t, bin)
	if !h.Flags.HasMaxTokens() || !h.RoutingMisaligned || h.HasMaxTokens || h.HasEstCost {
		t.Fatalf("header %+v", h)
	}
	// The same with an integer is aligned.
	h = mustReadHeader(t, mustEncode(t, strings.Replace(json, "null", "7", 1)))
	if h.RoutingMisaligned || !h.HasMaxTokens || h.MaxTokens != 7 || !h.HasEstCost || h.ContentHint != 2 {
		t.Fatalf("header %+v", h)
	}
}

func TestSchemaEncode(t *testing.T) {
	json := []byte(`{"id":"chatcmpl-9","model":"gpt-4o","choices":[{"finish_reason":"stop"}]}`)
	for _, schema := range []Schema{SchemaRequest, SchemaResponse, SchemaStream, SchemaEmbeddingRequest, SchemaEmbeddingResponse, SchemaError, SchemaCustom, SchemaUnknown} {
		bin, err := AppendEncodeSchema(nil, json, schema, Limits{})
		if err != nil {
			t.Fatalf("%#x: %v", schema, err)
		}
		text, err := appendFrameText(nil, json, schema, Limits{})
		if err != nil {
			t.Fatalf("%#x: %v", schema, err)
		}
		checkRoundTrip(t, string(json), bin, text)
		h := mustReadHeader(t, bin)
		switch {
		case isRequestSchema(schema):
			if string(h.Model) != "gpt-4o" || !h.HasEstCost {
				t.Errorf("%#x: %+v", schema, h)
			}
		case isResponseSchema(schema):
			if string(h.ID) != "chatcmpl-9" || h.FinishReason != FinishStop || h.HasEstCost {
				t.Errorf("%#x: %+v", schema, h)
			}
		default:
			if h.HeaderLen != FixedHeaderLen || h.Flags != 0 {
				t.Errorf("%#x: %+v", schema, h)
			}
		}
	}
	if _, err := AppendEncodeSchema(nil, json, 0x42, Limits{}); !errors.Is(err, ErrSchema) {
		t.Errorf("undefined schema: %v", err)
	}
}

func TestErrorFrame(t *testing.T) {
	for _, msg := range []string{"no agent serves model gpt-4o", "quote \" backslash \\ newline \n tab \t nul \x00 bad \xff é"} {
		bin, err := AppendErrorFrame(nil, "no_route", msg)
		if err != nil {
			t.Fatal(err)
		}
		h := mustReadHeader(t, bin)
		if h.Schema != SchemaError || len(h.ID) != 0 || len(h.Model) != 0 || h.FinishReason != FinishUnknown ||
			uint16(h.Flags) != 0 || h.HasEstCost || h.HeaderLen != FixedHeaderLen+5 {
			t.Fatalf("header %+v", h)
		}
		body, err := AppendDecode(nil, bin, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if want := AppendErrorBody(nil, "no_route", msg); !bytes.Equal(body, want) {
			t.Fatalf("body %q, want %q", body, want)
		}
		var v struct {
			Error struct{ Message, Type, Code string }
		}
		if err := jsonUnmarshal(body, &v); err != nil {
			t.Fatalf("body %q: %v", body, err)
		}
		if v.Error.Type != "m2md_error" || v.Error.Code != "no_route" || v.Error.Message != strings.ToValidUTF8(msg, "\uFFFD") {
			t.Fatalf("body %q parsed as %+v", body, v)
		}
	}
	if got := string(AppendErrorBody(nil, "c", "a\x01\x1f/<>")); got != `{"error":{"message":"a\u0001\u001f/<>","type":"m2md_error","code":"c"}}` {
		t.Fatalf("escaping: %s", got)
	}
}

// bomb returns a few kilobytes of Brotli that expand to n zero bytes.
func bomb(t testing.TB, n int) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := brotli.NewWriterOptions(&buf, brotli.WriterOptions{Quality: 1, LGWin: 24})
	zeros := make([]byte, 1<<20)
	for i := 0; i < n; i += len(zeros) {
		if _, err := w.Write(zeros[:min(len(zeros), n-i)]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestBrotliBomb(t *testing.T) {
	cases := []struct{ limit, size int }{{1 << 20, 2 << 20}}
	if !raceEnabled { // 16 MiB through an instrumented decoder takes a while
		cases = append(cases, struct{ limit, size int }{DefaultMaxDecompressed, 64 << 20})
	}
	for _, c := range cases {
		b := bomb(t, c.size)
		if len(b) > 16<<10 {
			t.Fatalf("bomb is %d bytes", len(b))
		}
		t.Logf("%d bytes of Brotli expand to %d MiB", len(b), c.size>>20)
		f := assemble(SchemaCustom, SecurityNone, FlagCompressed, nil, b, 0)
		lim := Limits{MaxDecompressed: c.limit}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err := AppendDecode(nil, f, lim)
		runtime.ReadMemStats(&after)
		if !errors.Is(err, ErrLimit) {
			t.Fatalf("limit %d: %v, want ErrLimit", c.limit, err)
		}
		// Output grows to the limit and is then abandoned. The decoder's
		// ring buffer grows by doubling up to the stream's window (16 MiB
		// at most: large windows are not accepted).
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > uint64(3*c.limit+(34<<20)) {
			t.Errorf("limit %d: allocated %d bytes", c.limit, alloc)
		}
		text := append([]byte(Prefix), b64.EncodeToString(f[PrefixLen:])...)
		if _, err := decodeText(nil, text, lim); !errors.Is(err, ErrLimit) {
			t.Fatalf("text, limit %d: %v, want ErrLimit", c.limit, err)
		}
		if _, err := AppendDecodeBrotliText(nil, append([]byte(brotliTextPrefix), b64.EncodeToString(b)...), lim); !errors.Is(err, ErrLimit) {
			t.Fatalf("Brotli text, limit %d: %v, want ErrLimit", c.limit, err)
		}
	}
}

// Exactly at a limit is accepted; one byte more is not.
func TestDecompressLimitBoundary(t *testing.T) {
	json := []byte(`{"a":"` + strings.Repeat("x", 994) + `"}`) // 1002 bytes
	f := mustEncode(t, string(json))
	if _, err := AppendDecode(nil, f, Limits{MaxDecompressed: len(json)}); err != nil {
		t.Fatalf("at the limit: %v", err)
	}
	if _, err := AppendDecode(nil, f, Limits{MaxDecompressed: len(json) - 1}); !errors.Is(err, ErrLimit) {
		t.Fatalf("one byte over: %v", err)
	}
	// A frame exactly as long as the message limit is read.
	if _, err := AppendDecode(nil, f, Limits{MaxMessage: len(f)}); err != nil {
		t.Fatalf("frame of exactly MaxMessage bytes: %v", err)
	}
	if _, err := AppendDecode(nil, f, Limits{MaxMessage: len(f) - 1}); !errors.Is(err, ErrLimit) {
		t.Fatalf("frame one byte over MaxMessage: %v", err)
	}
	// An uncompressed payload is held to the same limit.
	plain := assemble(SchemaCustom, SecurityNone, 0, nil, json, crc32.ChecksumIEEE(json))
	if _, err := AppendDecode(nil, plain, Limits{MaxDecompressed: len(json)}); err != nil {
		t.Fatalf("uncompressed, at the limit: %v", err)
	}
	if _, err := AppendDecode(nil, plain, Limits{MaxDecompressed: len(json) - 1}); !errors.Is(err, ErrLimit) {
		t.Fatalf("uncompressed, one byte over: %v", err)
	}
	// The limit counts the payload, not what dst held before it.
	pre := bytes.Repeat([]byte{'p'}, 4096)
	if out, err := AppendDecode(pre, f, Limits{MaxDecompressed: len(json)}); err != nil || !bytes.Equal(out[len(pre):], json) {
		t.Fatalf("at the limit after %d bytes: %v", len(pre), err)
	}
	// A dst whose room fits the payload exactly gets the payload, and
	// nothing after it.
	for _, room := range []int{len(json), len(json) + 1} {
		dst := make([]byte, 3, 3+room)
		copy(dst, "pre")
		if out, err := AppendDecode(dst, f, Limits{}); err != nil || !bytes.Equal(out[3:], json) {
			t.Fatalf("room for %d bytes: %d bytes out, %v", room, len(out)-3, err)
		}
	}
}

func TestBrotliText(t *testing.T) {
	json := []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"Hello, world!"}]}`)
	// The reference's example, made with quality 11 and a 22-bit window.
	const want = "#M2M[v3.0]|DATA:G0gA4IzUYs0Z7kSQt5Rd17Rmoim2N9N+ikUHHHLgcMCwBRIIBrUHJJJVAlfrvNoC86Y93dhTpQBYJ1jxLf74"
	var ref bytes.Buffer
	w := brotli.NewWriterOptions(&ref, brotli.WriterOptions{Quality: textQuality, LGWin: brotliWindowLog})
	if _, err := w.Write(json); err != nil || w.Close() != nil {
		t.Fatal("brotli")
	}
	if got := brotliTextPrefix + b64.EncodeToString(ref.Bytes()); got != want {
		t.Fatalf("the library's quality 11 / window 22 output\n got %s\nwant %s", got, want)
	}
	back, err := AppendDecodeBrotliText([]byte("x"), []byte(want), Limits{})
	if err != nil || string(back) != "x"+string(json) {
		t.Fatalf("decode: %q, %v", back, err)
	}
	got, err := AppendEncodeBrotliText(nil, json, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	// A smaller window changes only the stream header.
	if len(got) > len(want)+4 {
		t.Errorf("got %d bytes, the 22-bit window gives %d: %s", len(got), len(want), got)
	}
	for _, f := range testkit.Corpus(t) {
		if len(f.Data) > 1500 || raceEnabled && len(f.Data) > 300 {
			continue // quality 11 is slow; small documents suffice
		}
		enc, err := AppendEncodeBrotliText(nil, f.Data, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		dec, err := AppendDecodeBrotliText(nil, enc, Limits{})
		if err != nil || !bytes.Equal(dec, f.Data) {
			t.Fatalf("%s: round trip: %v", f.Name, err)
		}
	}
	for _, tt := range []struct {
		name, text string
		want       error
	}{
		{"no DATA:", "#M2M[v3.0]|G0gA4IzU", ErrBadPrefix},
		{"other prefix", "#M2M|1|AAAA", ErrBadPrefix},
		{"bad base64", "#M2M[v3.0]|DATA:G0gA4IzU!", ErrMalformed},
		{"line break", "#M2M[v3.0]|DATA:G0gA\n4IzU", ErrMalformed},
		{"not brotli", "#M2M[v3.0]|DATA:AAAAAAAA", ErrMalformed},
		{"truncated", want[:len(want)-8], ErrMalformed},
	} {
		out, err := AppendDecodeBrotliText([]byte("keep"), []byte(tt.text), Limits{})
		if !errors.Is(err, tt.want) || string(out) != "keep" {
			t.Errorf("%s: %q, %v; want %v", tt.name, out, err, tt.want)
		}
	}
	if _, err := AppendEncodeBrotliText(nil, []byte("\xff"), Limits{}); !errors.Is(err, ErrMalformed) {
		t.Errorf("invalid UTF-8: %v", err)
	}
	notUTF8 := append([]byte(brotliTextPrefix), b64.EncodeToString(brotliOf(t, []byte("\xff\xfe")))...)
	if _, err := AppendDecodeBrotliText(nil, notUTF8, Limits{}); !errors.Is(err, ErrMalformed) {
		t.Errorf("decoded invalid UTF-8: %v", err)
	}
}

func TestAllocations(t *testing.T) {
	data := testkit.CorpusFile(t, "req-long-100k-01.json")
	bin := mustEncode(t, string(data))
	text := mustEncodeText(t, string(data))
	var h Header
	if err := ReadTextHeader(text, &h); err != nil { // sizes h's buffer
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(50, func() {
		if err := ReadHeader(bin, &h); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("ReadHeader: %v allocations", n)
	}
	if n := testing.AllocsPerRun(50, func() {
		if err := ReadTextHeader(text, &h); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("ReadTextHeader: %v allocations", n)
	}
	if n := testing.AllocsPerRun(20, func() {
		if err := SetSequence(bin, 1, 2); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("SetSequence: %v allocations", n)
	}
	if testing.Short() || raceEnabled {
		return
	}
	// With a big enough dst, encoding and decoding allocate only inside
	// the Brotli library.
	dst := make([]byte, 0, 2*len(data)+4096)
	if n := testing.AllocsPerRun(10, func() {
		if _, err := AppendDecode(dst, bin, Limits{}); err != nil {
			t.Fatal(err)
		}
	}); n > 4 {
		t.Errorf("AppendDecode: %v allocations", n)
	}
	if n := testing.AllocsPerRun(10, func() {
		if _, err := AppendEncode(dst, data, Limits{}); err != nil {
			t.Fatal(err)
		}
	}); n > 4 {
		t.Errorf("AppendEncode: %v allocations", n)
	}
}

func TestIsTextShape(t *testing.T) {
	text := mustEncodeText(t, frameAJSON)
	bin, err := AppendEncode(nil, []byte(frameAJSON), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		fr   []byte
		want bool
	}{
		{"text", text, true},
		{"binary", bin, false},
		{"prefix only", []byte(Prefix), false},
		{"other prefix", append([]byte("#M2M|2|"), text[PrefixLen:]...), false},
	} {
		if got := IsTextShape(tc.fr); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
