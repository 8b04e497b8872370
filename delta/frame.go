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
	return appendSmaller(dst, doc, base.d, ext, lim)
}

// appendSmaller appends doc's request frame with the extension block ext
// as a delta against dict when that is smaller than the full frame, else
// the full frame. A document that cannot travel as a delta (dictionary and
// document over MaxSpan) goes full.
func appendSmaller(dst, doc, dict []byte, ext frame.Extension, lim frame.Limits) (out []byte, delta bool, err error) {
	buf := bufpool.Get(len(doc)/goodRatio + 64)
	defer bufpool.Put(buf)
	p, err := appendEncode((*buf)[:0], doc, dict)
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
	var h frame.Header
	if err := readDeltaHeader(fr, &h, lim); err != nil {
		return dst, err
	}
	if h.Ext.DocID == 0 {
		return dst, errorf(ErrNotDelta, "a reply delta: decode it with AppendDecodeReply")
	}
	if base == nil {
		return dst, errorf(ErrNoBase, "base %d", h.Ext.BaseID)
	}
	return decodePayload(dst, fr, &h, base.d, lim)
}

// readDeltaHeader reads the header of fr, a delta frame of either kind.
func readDeltaHeader(fr []byte, h *frame.Header, lim frame.Limits) error {
	lim = lim.Effective()
	if len(fr) > lim.MaxMessage {
		return errorf(frame.ErrLimit, "frame of %d bytes exceeds the %d-byte message limit", len(fr), lim.MaxMessage)
	}
	if err := frame.ReadHeader(fr, h); err != nil {
		return err
	}
	if h.Security == frame.SecurityAEAD {
		return frame.ErrEncrypted
	}
	if !h.Ext.Delta {
		return errorf(ErrNotDelta, "extension block %+v", h.Ext)
	}
	return nil
}

// decodePayload decodes the delta payload of fr, whose header is h,
// against dict and checks the document.
func decodePayload(dst, fr []byte, h *frame.Header, dict []byte, lim frame.Limits) ([]byte, error) {
	lim = lim.Effective()
	at := h.PayloadOffset() + 8
	start := len(dst)
	out, err := appendDecode(dst, fr[at:at+int(h.PayloadLen)], dict, lim)
	if err != nil {
		return dst, err
	}
	doc := out[start:]
	if got := crc32.ChecksumIEEE(doc); got != h.CRC {
		return dst, errorf(ErrBaseMismatch, "frame says %08x, document has %08x", h.CRC, got)
	}
	if !utf8.Valid(doc) {
		return dst, errorf(frame.ErrMalformed, "document is not valid UTF-8")
	}
	if err := jsonscan.Validate(doc, lim); err != nil {
		if errors.Is(err, jsonscan.ErrSyntax) {
			return dst, errorf(frame.ErrInvalidJSON, "document: %v", err)
		}
		return dst, errorf(frame.ErrLimit, "document: %v", err)
	}
	return out, nil
}

// AppendReplyDict appends to dst D_r, the dictionary of the reply to a
// request (docs/protocol.md §4.3, "Reply deltas"): the response of base,
// the request's base, when the request travelled as a delta (base not
// nil), then request, the request's full JSON. Requester and provider
// build the same bytes.
func AppendReplyDict(dst []byte, base *Base, request []byte) []byte {
	if base != nil {
		dst = append(dst, base.Response()...)
	}
	return append(dst, request...)
}

// replyGoodRatio is the delta-to-response ratio under which a reply delta
// is sent without comparing it to the plain frame. Per-message Brotli q5
// leaves a chat response at 0.42-0.59 of its JSON on the corpus, and the
// comparison's Brotli pass made a reply delta cost more CPU than the plain
// frame (encode and decode 25.2 ms against 16.1 for the 36 corpus
// responses; 9.8 ms without it). At 1/2 the shortcut takes the same 36
// decisions on the corpus as the full comparison; a response it misjudges
// is at most a few percent larger than its plain frame.
const replyGoodRatio = 2

// AppendEncodeReply appends the final response frame that carries resp,
// the answer to the request whose reply dictionary is dict
// (AppendReplyDict): a reply delta (schema 02 with the block 01 01) when
// it is at most half the response, or else smaller than the plain frame
// (on a tie the plain frame, which needs no dictionary to read);
// otherwise the plain frame AppendEncode writes. delta reports which. A
// document that is not a chat response (it would not travel as schema 02)
// always gets the plain frame.
func AppendEncodeReply(dst, resp, dict []byte, lim frame.Limits) (out []byte, delta bool, err error) {
	buf := bufpool.Get(len(resp)/replyGoodRatio + 64)
	defer bufpool.Put(buf)
	p, err := appendEncode((*buf)[:0], resp, dict)
	*buf = p
	if err != nil {
		// Too large for a delta (ErrTooLarge), or empty: the plain frame
		// (which refuses an empty document itself).
		out, err = frame.AppendEncode(dst, resp, lim)
		return out, false, err
	}
	start := len(dst)
	out, err = frame.AppendEncodeReplyDelta(dst, resp, p, lim)
	if err != nil {
		// Not a chat response (ErrSchema), or over the limits: the plain
		// frame says which.
		out, err = frame.AppendEncode(dst, resp, lim)
		return out, false, err
	}
	if len(p) <= len(resp)/replyGoodRatio {
		return out, true, nil
	}
	deltaLen := len(out) - start
	plain, err := frame.AppendEncode(out, resp, lim)
	if err != nil || len(plain)-len(out) > deltaLen {
		return out, true, nil
	}
	n := copy(plain[start:], plain[len(out):])
	return plain[:start+n], false, nil
}

// AppendDecodeReply decodes a reply delta (a final response frame, binary
// shape, whose extension block says DELTA) against dict, the dictionary
// of the request it answers (AppendReplyDict), and appends the response
// to dst, byte for byte as its provider had it. Security modes as
// AppendDecodeFrame. Errors: ErrNotDelta for another frame (a request's
// delta included), ErrCorrupt for a delta that does not decode,
// ErrBaseMismatch when the response fails the frame's CRC-32, the frame
// package's sentinels for the frame and for a response that is not JSON
// within lim. On error dst is returned unchanged.
func AppendDecodeReply(dst, fr, dict []byte, lim frame.Limits) ([]byte, error) {
	var h frame.Header
	if err := readDeltaHeader(fr, &h, lim); err != nil {
		return dst, err
	}
	if h.Ext.DocID != 0 {
		return dst, errorf(ErrNotDelta, "a request's delta: decode it with AppendDecodeFrame")
	}
	return decodePayload(dst, fr, &h, dict, lim)
}
