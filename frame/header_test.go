package frame

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// An AEAD frame's header reads the same from either shape whatever its
// header_len: the text reader decodes the header in whole Base64 quads,
// which end exactly at the header when header_len is a multiple of 3.
func TestTextHeaderOfAEADFrame(t *testing.T) {
	sealed := bytes.Repeat([]byte{0xa5}, aeadOverhead+5) // nonce, ciphertext, tag
	for _, varLen := range []int{0, 1, 2, 3, 4} {
		f := assemble(SchemaCustom, SecurityAEAD, 0, bytes.Repeat([]byte{7}, varLen), nil, 0)
		f = append(f[:len(f)-8], sealed...) // no payload_len and crc32 in clear
		text := append([]byte(Prefix), b64.EncodeToString(f[PrefixLen:])...)
		var hb, ht Header
		if err := ReadHeader(f, &hb); err != nil {
			t.Fatalf("header_len %d: ReadHeader: %v", FixedHeaderLen+varLen, err)
		}
		if err := ReadTextHeader(text, &ht); err != nil {
			t.Fatalf("header_len %d: ReadTextHeader: %v", FixedHeaderLen+varLen, err)
		}
		if ht.HeaderLen != hb.HeaderLen || ht.Security != SecurityAEAD || ht.PayloadKnown || ht.PayloadOffset() != hb.PayloadOffset() {
			t.Errorf("header_len %d: text %+v, binary %+v", FixedHeaderLen+varLen, ht, hb)
		}
	}
}

// A response header followed by bytes its fields do not account for reads
// as the Rust decoder reads it, the extra bytes ignored, when the frame
// has no extension block; with a block the fields must end where it starts.
func TestResponseHeaderExtraBytes(t *testing.T) {
	fields := []byte{1, 'x', 1, 'm', byte(FinishStop), 5, 7}
	extra := append(bytes.Clone(fields), 'z', 'z')
	var h Header
	if err := ReadHeader(assemble(SchemaResponse, SecurityNone, 0, extra, []byte("{}"), 0), &h); err != nil ||
		string(h.ID) != "x" || string(h.Model) != "m" || h.PromptTokens != 5 || h.CompletionTokens != 7 {
		t.Fatalf("extra bytes without a block: %+v, %v", h, err)
	}
	withBlock := append(bytes.Clone(extra), replyBlock[:]...)
	if err := ReadHeader(assemble(SchemaResponse, SecurityNone, FlagHasExtensions, withBlock, []byte("{}"), 0), &h); !errors.Is(err, ErrMalformed) {
		t.Fatalf("extra bytes before the block: %v, want ErrMalformed", err)
	}
	if err := ReadHeader(assemble(SchemaResponse, SecurityNone, FlagHasExtensions, append(bytes.Clone(fields), replyBlock[:]...), []byte("{}"), 0), &h); err != nil || !h.Ext.Delta {
		t.Fatalf("fields then the block: %+v, %v", h, err)
	}
}

// A header_len past the frame's end is refused, and the error gives the
// bytes the frame has after its prefix.
func TestHeaderLenPastTheEnd(t *testing.T) {
	f := assemble(SchemaCustom, SecurityNone, 0, nil, []byte("{}"), 0)
	f[OffHeaderLen] = byte(len(f) - PrefixLen + 1)
	err := ReadHeader(f, new(Header))
	if want := "exceeds the 30 bytes after the prefix"; !errors.Is(err, ErrTruncated) || !strings.Contains(err.Error(), want) {
		t.Fatalf("%v; want ErrTruncated saying %q", err, want)
	}
}

// A routing header cut short after its roles, or before the max_tokens its
// flag announces, is misaligned: advisory, so the frame still reads, but
// its fields are not taken.
func TestRoutingCutShort(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags Flags
		v     string
	}{
		{"no content_hint", 0, `06 67 70 74 2d 34 6f 01 01`},
		{"no max_tokens", flagHasMaxTokens, `06 67 70 74 2d 34 6f 01 01 02`},
	} {
		var h Header
		if err := ReadHeader(assemble(SchemaRequest, SecurityNone, tc.flags, unhex(t, tc.v), []byte("{}"), 0), &h); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !h.RoutingMisaligned || h.HasMaxTokens || h.RoleCount() != 0 {
			t.Errorf("%s: misaligned %v, max_tokens %v, %d roles", tc.name, h.RoutingMisaligned, h.HasMaxTokens, h.RoleCount())
		}
	}
	// A field whose length runs past the variable header, even by one
	// byte, is malformed.
	if err := ReadHeader(assemble(SchemaRequest, SecurityNone, 0, unhex(t, `03 67 70`), []byte("{}"), 0), new(Header)); !errors.Is(err, ErrMalformed) {
		t.Errorf("model one byte past the header: %v, want ErrMalformed", err)
	}
}

// A payload_len past the frame's end is truncation, and the error gives
// the bytes there are; an empty payload is not truncation but no JSON.
func TestPayloadLen(t *testing.T) {
	f := assemble(SchemaCustom, SecurityNone, 0, nil, []byte("{}"), 0)
	f[MinFrameLen] = 3
	err := ReadHeader(f, new(Header))
	if want := "payload_len 3 exceeds the 2 bytes left"; !errors.Is(err, ErrTruncated) || !strings.Contains(err.Error(), want) {
		t.Errorf("%v; want ErrTruncated saying %q", err, want)
	}
	if _, err := AppendDecode(nil, assemble(SchemaCustom, SecurityNone, 0, nil, nil, 0), Limits{}); !errors.Is(err, ErrInvalidJSON) {
		t.Errorf("empty payload: %v, want ErrInvalidJSON", err)
	}
}
