package delta

import (
	"errors"
	"hash/crc32"
	"unicode/utf8"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/bufpool"
	"github.com/m2md/m2md/internal/jsonscan"
)

// goodRatio is the delta-to-document ratio under which a delta is sent
// without comparing it to the full frame: per-message Brotli does not
// compress chat JSON 8-fold, so the delta is smaller anyway and the full
// frame's Brotli pass is saved.
const goodRatio = 8

// AppendEncodeFrame appends the request frame that carries doc as the
// continuation of base, whose doc_id is ext.BaseID: a delta frame (ext
// block DELTA|BASE, payload AppendEncode's) when it is smaller than the
// full frame, else the full frame with BASE. delta reports which. ext.DocID
// and ext.BaseID must not be 0; ext.Delta is ignored. A base too large for
// a delta (ErrTooLarge) gives the full frame.
func AppendEncodeFrame(dst, doc []byte, ext frame.Extension, base *Base, lim frame.Limits) (out []byte, delta bool, err error) {
	ext.Delta = false
	if base == nil || ext.BaseID == 0 {
		out, err = frame.AppendEncodeExt(dst, doc, ext, lim)
		return out, false, err
	}
	buf := bufpool.Get(len(doc)/goodRatio + 64)
	defer bufpool.Put(buf)
	p, err := AppendEncode((*buf)[:0], doc, base)
	*buf = p
	if err != nil {
		if errors.Is(err, ErrTooLarge) {
			out, err = frame.AppendEncodeExt(dst, doc, ext, lim)
			return out, false, err
		}
		return dst, false, err
	}
	start := len(dst)
	ext.Delta = true
	out, err = frame.AppendEncodeDelta(dst, doc, p, ext, lim)
	if err != nil || len(p) <= len(doc)/goodRatio {
		return out, err == nil, err
	}
	// A poor delta (the base shares little with the document): keep it
	// only if the full frame is not smaller.
	deltaLen := len(out) - start
	ext.Delta = false
	full, err := frame.AppendEncodeExt(out, doc, ext, lim)
	if err != nil {
		return out, true, nil
	}
	if fullLen := len(full) - len(out); fullLen < deltaLen {
		n := copy(full[start:], full[len(out):])
		return full[:start+n], false, nil
	}
	return out, true, nil
}

// AppendDecodeFrame decodes a delta request frame (binary shape; extension
// block with DELTA) against base and appends the document to dst, byte for
// byte as its requester had it. Like frame.AppendDecode it takes security
// modes none and HMAC without verifying (verify first) and refuses AEAD
// (frame.ErrEncrypted). Errors: ErrNoBase when base is nil, ErrNotDelta
// for another frame, ErrCorrupt for a delta that does not decode,
// ErrBaseMismatch when the document fails the frame's CRC-32, the frame
// package's sentinels for the frame and for a document that is not JSON
// within lim. On error dst is returned unchanged.
func AppendDecodeFrame(dst, fr []byte, base *Base, lim frame.Limits) ([]byte, error) {
	lim = lim.Effective()
	if len(fr) > lim.MaxMessage {
		return dst, errorf(frame.ErrLimit, "frame of %d bytes exceeds the %d-byte message limit", len(fr), lim.MaxMessage)
	}
	var h frame.Header
	if err := frame.ReadHeader(fr, &h); err != nil {
		return dst, err
	}
	if h.Security == frame.SecurityAEAD {
		return dst, frame.ErrEncrypted
	}
	if !h.Ext.Delta {
		return dst, errorf(ErrNotDelta, "extension block %+v", h.Ext)
	}
	if base == nil {
		return dst, errorf(ErrNoBase, "base %d", h.Ext.BaseID)
	}
	at := h.PayloadOffset() + 8
	start := len(dst)
	out, err := AppendDecode(dst, fr[at:at+int(h.PayloadLen)], base, lim)
	if err != nil {
		return dst, err
	}
	doc := out[start:]
	if got := crc32.ChecksumIEEE(doc); got != h.CRC {
		return dst, errorf(ErrBaseMismatch, "base %d: frame says %08x, document has %08x", h.Ext.BaseID, h.CRC, got)
	}
	if !utf8.Valid(doc) {
		return dst, errorf(frame.ErrMalformed, "document is not valid UTF-8")
	}
	if err := jsonscan.Validate(doc, jsonscan.Limits{MaxDepth: lim.MaxDepth, MaxString: lim.MaxString, MaxArray: lim.MaxArray}); err != nil {
		if errors.Is(err, jsonscan.ErrSyntax) {
			return dst, errorf(frame.ErrInvalidJSON, "document: %v", err)
		}
		return dst, errorf(frame.ErrLimit, "document: %v", err)
	}
	return out, nil
}
