package frame

import "encoding/binary"

// The m2md extension block (docs/protocol.md §4.3, feature `delta`). A
// request frame (schema 01) whose common flag HAS_EXTENSIONS is set ends
// its variable header, after the routing fields, with
//
//	ext flags (1) ‖ doc_id (uvarint) ‖ base_id (uvarint, iff BASE) ‖ L (1)
//
// where L is the length of what precedes it in the block (2..21). A final
// response frame (schema 02) may carry the block of a reply delta, after
// its response header fields: exactly 01 01 (flags DELTA, L 1). Being
// inside header_len, the block is covered by the HMAC and authenticated
// (not encrypted) by AEAD like the routing header, and a reader finds it
// from the end of the variable header without parsing the routing fields.

// Extension flag bits (the block's first byte).
const (
	// extDelta: the payload is a zstd delta against the base (requires extBase).
	extDelta = 1 << 0
	// extBase: base_id follows doc_id.
	extBase = 1 << 1
)

const (
	// minExtensionLen and maxExtensionLen bound L, the extension body's
	// length: flags and a 1-byte doc_id at least; flags and two 10-byte
	// uvarints at most.
	minExtensionLen = 2
	maxExtensionLen = 21
	// maxUvarintLen is the longest uvarint of a uint64.
	maxUvarintLen = 10
)

// Extension is what the extension block says. The zero value means no
// block: DocID is never 0 in a request's block, and a response's block
// (a reply delta) has Delta alone.
type Extension struct {
	// DocID is this document's id, chosen by the requester, so that a
	// later request can name it as its base.
	DocID uint64
	// BaseID is the doc_id of the document this one continues; 0 when the
	// block has no base (the BASE bit clear).
	BaseID uint64
	// Delta reports that the payload is a delta against the base
	// (COMPRESSED clear; decode it with package delta), not the document.
	// On a response frame: against the request it answers (a reply
	// delta).
	Delta bool
}

// Present reports whether the frame carries an extension block.
func (e Extension) Present() bool { return e.DocID != 0 || e.Delta }

// replyBlock is the whole extension block of a reply delta (schema 02):
// ext flags DELTA, L 1.
var replyBlock = [2]byte{extDelta, 1}

// parseReplyExtension reads the block at the end of v, the variable header
// of a response frame with HAS_EXTENSIONS: it must be exactly replyBlock.
func parseReplyExtension(v []byte) (Extension, int, error) {
	if len(v) < len(replyBlock) || v[len(v)-1] != replyBlock[1] || v[len(v)-2] != replyBlock[0] {
		return Extension{}, 0, errorf(ErrMalformed, "extension: a response's block must be exactly 01 01 (DELTA, L 1)")
	}
	return Extension{Delta: true}, len(replyBlock), nil
}

// check refuses what no reader accepts.
func (e Extension) check() error {
	switch {
	case e.DocID == 0:
		return errorf(ErrMalformed, "extension: doc_id 0")
	case e.Delta && e.BaseID == 0:
		return errorf(ErrMalformed, "extension: a delta needs a base_id")
	}
	return nil
}

// appendExtension writes the block for e (checked).
func appendExtension(dst []byte, e Extension) []byte {
	start := len(dst)
	var flags byte
	if e.Delta {
		flags |= extDelta
	}
	if e.BaseID != 0 {
		flags |= extBase
	}
	dst = append(dst, flags)
	dst = appendUvarint(dst, e.DocID)
	if e.BaseID != 0 {
		dst = appendUvarint(dst, e.BaseID)
	}
	return append(dst, byte(len(dst)-start))
}

// parseExtension reads the block at the end of v, the variable header of a
// request frame with HAS_EXTENSIONS, and returns how many bytes of v it
// takes (L + 1).
func parseExtension(v []byte) (Extension, int, error) {
	var e Extension
	if len(v) == 0 {
		return e, 0, errorf(ErrMalformed, "extension: HAS_EXTENSIONS set but the variable header is empty")
	}
	l := int(v[len(v)-1])
	if l < minExtensionLen || l > maxExtensionLen {
		return e, 0, errorf(ErrMalformed, "extension: length %d outside %d..%d", l, minExtensionLen, maxExtensionLen)
	}
	if l+1 > len(v) {
		return e, 0, errorf(ErrMalformed, "extension: length %d runs past the %d-byte variable header", l, len(v))
	}
	body := v[len(v)-1-l : len(v)-1]
	flags := body[0]
	if flags&^(extDelta|extBase) != 0 {
		return e, 0, errorf(ErrMalformed, "extension: unknown flag bits %#02x", flags&^(extDelta|extBase))
	}
	if flags&extDelta != 0 && flags&extBase == 0 {
		return e, 0, errorf(ErrMalformed, "extension: DELTA without BASE")
	}
	pos := 1
	var err error
	if e.DocID, pos, err = extID(body, pos, "doc_id"); err != nil {
		return e, 0, err
	}
	if flags&extBase != 0 {
		if e.BaseID, pos, err = extID(body, pos, "base_id"); err != nil {
			return e, 0, err
		}
	}
	if pos != len(body) {
		return e, 0, errorf(ErrMalformed, "extension: %d bytes after its fields", len(body)-pos)
	}
	e.Delta = flags&extDelta != 0
	return e, l + 1, nil
}

// extID reads a non-zero, minimal uvarint (the rules of a DATA header's
// request_id, docs/protocol.md §4).
func extID(b []byte, pos int, what string) (uint64, int, error) {
	x, n := readUvarint(b[pos:])
	switch {
	case n == 0:
		return 0, 0, errorf(ErrMalformed, "extension: %s runs past the block", what)
	case n < 0 || n > maxUvarintLen:
		return 0, 0, errorf(ErrMalformed, "extension: %s longer than 10 bytes", what)
	case n == maxUvarintLen && b[pos+n-1] > 1:
		// readUvarint keeps the Rust reference's M2M v1 reading, which
		// drops the bits of a tenth byte beyond 64; an id is an m2md field
		// and must read back as what was written.
		return 0, 0, errorf(ErrMalformed, "extension: %s overflows 64 bits", what)
	case x == 0:
		return 0, 0, errorf(ErrMalformed, "extension: %s is 0", what)
	case n > 1 && b[pos+n-1] == 0:
		return 0, 0, errorf(ErrMalformed, "extension: %s is not minimally encoded", what)
	}
	return x, pos + n, nil
}

// AppendEncodeExt is AppendEncode for a full request document that
// carries an extension block (docs/protocol.md §4.3): doc_id, and base_id
// when ext.BaseID is not 0. The payload is the document as AppendEncode
// writes it. json must be a request (it classifies as schema 01) and
// ext.Delta false; use AppendEncodeDelta for a delta payload.
func AppendEncodeExt(dst, json []byte, ext Extension, lim Limits) ([]byte, error) {
	if ext.Delta {
		return dst, errorf(ErrMalformed, "extension: AppendEncodeExt writes full documents; use AppendEncodeDelta")
	}
	if err := ext.check(); err != nil {
		return dst, err
	}
	return appendFrameExt(dst, json, 0, &ext, nil, false, lim)
}

// AppendEncodeDelta appends a request frame for the document json whose
// payload is delta, the document encoded against its base by package
// delta: the routing header (without its optional est_cost_usd,
// docs/protocol.md §4.3) and the CRC-32 are json's, COMPRESSED is clear,
// and the extension block has DELTA, ext.DocID and ext.BaseID (both
// non-zero). json itself is not carried.
func AppendEncodeDelta(dst, json, delta []byte, ext Extension, lim Limits) ([]byte, error) {
	ext.Delta = true
	if err := ext.check(); err != nil {
		return dst, err
	}
	return appendFrameExt(dst, json, SchemaRequest, &ext, delta, false, lim)
}

// AppendEncodeReplyDelta appends the final response frame (schema 02) of
// the document json whose payload is delta, json encoded by package delta
// against the request it answers (a reply delta, docs/protocol.md §4.3):
// the response header and the CRC-32 are json's, COMPRESSED is clear and
// the extension block is 01 01. json must classify as a response (ErrSchema
// otherwise: send it as a plain frame); json itself is not carried.
func AppendEncodeReplyDelta(dst, json, delta []byte, lim Limits) ([]byte, error) {
	return appendFrameExt(dst, json, 0, &Extension{Delta: true}, delta, false, lim)
}

// StripExtension removes the extension block from a full request frame in
// place: it clears HAS_EXTENSIONS, shortens header_len and moves the rest
// of the frame down, returning the shorter frame. A daemon uses it to
// deliver a request to a session without the feature; the frame must be
// in clear (security none, or opened) and protected again afterwards. A
// frame without a block is returned as it is; a delta cannot be stripped
// (its payload means nothing without its base).
func StripExtension(frame []byte) ([]byte, error) {
	var h Header
	if err := ReadHeader(frame, &h); err != nil {
		return frame, err
	}
	if h.ExtLen == 0 {
		return frame, nil
	}
	if h.Ext.Delta {
		return frame, errorf(ErrDelta, "a delta frame cannot lose its extension block")
	}
	end := h.PayloadOffset()
	n := copy(frame[end-h.ExtLen:], frame[end:])
	frame = frame[:end-h.ExtLen+n]
	binary.LittleEndian.PutUint16(frame[OffHeaderLen:], uint16(h.HeaderLen-h.ExtLen))
	binary.LittleEndian.PutUint32(frame[OffFlags:], uint32(h.Flags&^FlagHasExtensions))
	return frame, nil
}
