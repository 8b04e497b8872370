package frame

import (
	"hash/crc32"
	"unicode/utf8"

	"github.com/m2md/m2md/internal/jsonscan"
)

// AppendDecode decodes a binary-shape M2M v1 frame and appends its JSON
// payload to dst, byte for byte as it was encoded (wire reference §3.12).
//
// It accepts security modes 00 and 01 without verifying anything: like the
// Rust plain decoder it ignores what follows the payload, an HMAC tag
// included. Verify the tag with the security package first when the
// session requires it. An AEAD frame (02) fails with ErrEncrypted.
//
// Everything is checked before the payload is returned: framing, the
// decompressed size against lim.MaxDecompressed (Brotli is decompressed as
// a stream and abandoned at the limit), UTF-8, the CRC-32, and that the
// payload is JSON within lim (an M2M frame only ever carries JSON; the
// Rust decoder skips this last check). On error dst is returned unchanged:
// there is never partial output.
func AppendDecode(dst, frame []byte, lim Limits) ([]byte, error) {
	lim = lim.Effective()
	if len(frame) > lim.MaxMessage {
		return dst, errorf(ErrLimit, "frame of %d bytes exceeds the %d-byte message limit", len(frame), lim.MaxMessage)
	}
	var h Header
	if err := ReadHeader(frame, &h); err != nil {
		return dst, err
	}
	if h.Security == SecurityAEAD {
		return dst, errorf(ErrEncrypted, "security mode %s", h.Security)
	}
	if h.Ext.Delta {
		if h.Ext.DocID == 0 {
			return dst, errorf(ErrDelta, "reply delta against its request")
		}
		return dst, errorf(ErrDelta, "doc_id %d against base %d", h.Ext.DocID, h.Ext.BaseID)
	}
	at := h.PayloadOffset() + 8
	payload := frame[at : at+int(h.PayloadLen)]
	return appendPayload(dst, payload, h.Flags.Compressed(), h.CRC, lim)
}

// appendPayload turns a payload as carried into the JSON it stands for
// and checks it. lim must be effective.
func appendPayload(dst, payload []byte, compressed bool, crc uint32, lim Limits) ([]byte, error) {
	start := len(dst)
	if compressed {
		var err error
		if dst, err = appendUnbrotli(dst, payload, lim.MaxDecompressed); err != nil {
			return dst, err
		}
	} else {
		if len(payload) > lim.MaxDecompressed {
			return dst, errorf(ErrLimit, "payload of %d bytes exceeds the %d-byte limit", len(payload), lim.MaxDecompressed)
		}
		dst = append(dst, payload...)
	}
	out := dst[start:]
	// The Rust decoder checks UTF-8 before the CRC; so do we, so that the
	// same input fails for the same reason.
	if !utf8.Valid(out) {
		return dst[:start], errorf(ErrMalformed, "payload is not valid UTF-8")
	}
	if got := crc32.ChecksumIEEE(out); got != crc {
		return dst[:start], errorf(ErrChecksum, "frame says %08x, payload has %08x", crc, got)
	}
	if err := jsonscan.Validate(out, lim); err != nil {
		return dst[:start], jsonError(err, "payload")
	}
	return dst, nil
}
