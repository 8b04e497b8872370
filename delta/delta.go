package delta

import (
	"encoding/binary"
	"math/bits"
	"slices"
	"sync"

	"github.com/klauspost/compress/zstd"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/bufpool"
)

// Base is a base document: a request as its requester sent it and the
// response it received, kept as the dictionary D = request ‖ response
// (docs/protocol.md §4.3). A Base is immutable and safe for concurrent use.
type Base struct {
	d      []byte
	reqLen int
}

// NewBase copies request and response into a new Base. response is the
// JSON of the request's final reply (for a stream, its chunks' JSON
// concatenated in order).
func NewBase(request, response []byte) *Base {
	d := make([]byte, 0, len(request)+len(response))
	d = append(append(d, request...), response...)
	return &Base{d: d, reqLen: len(request)}
}

// MakeBase returns the Base whose D is d, the request being d's first
// requestLen bytes. It takes d over: the caller must not modify it after.
func MakeBase(d []byte, requestLen int) *Base {
	return &Base{d: d, reqLen: min(max(requestLen, 0), len(d))}
}

// Request returns the base request's JSON. It aliases the Base: do not
// modify it.
func (b *Base) Request() []byte { return b.d[:b.reqLen:b.reqLen] }

// Response returns the base response's JSON. It aliases the Base.
func (b *Base) Response() []byte { return b.d[b.reqLen:len(b.d):len(b.d)] }

// Size is the bytes the Base holds, len(D).
func (b *Base) Size() int { return len(b.d) }

// The zstd frame parameters of a delta (docs/protocol.md §4.3): one frame
// stating Frame_Content_Size, no dictionary id (the dictionary is implied),
// and the 4-byte magic number omitted on the wire. This package writes it
// single-segment (its window is the content, so every match reaches the
// whole dictionary) without a content checksum (the frame's CRC-32 checks
// the document); it reads either segment mode, with or without checksum.
var magic = [4]byte{0x28, 0xb5, 0x2f, 0xfd}

const (
	fhdSingleSegment = 1 << 5
	fhdReserved      = 1 << 3
	fhdChecksum      = 1 << 2
	fhdDictID        = 3
)

// Level is the zstd level deltas are encoded with (docs/benchmarks.md
// compares them). A decoder does not need to know it.
var level = zstd.SpeedFastest

const (
	// MaxSpan bounds len(D) + len(document) for encoding: the encoder's
	// window must span both for every match to reach the base, and its
	// history buffer is that large. Longer conversations travel in full.
	MaxSpan = 16 << 20
	// minWindowLog is the smallest encoder window pooled (64 KiB).
	minWindowLog = 16
	maxWindowLog = 24 // MaxSpan
)

// encoders pools zstd encoders by window size: one class per power of two
// from 2^minWindowLog to 2^maxWindowLog.
var encoders [maxWindowLog - minWindowLog + 1]sync.Pool

func windowClass(span int) int {
	log := bits.Len(uint(span - 1))
	if log < minWindowLog {
		log = minWindowLog
	}
	return log - minWindowLog
}

func getEncoder(class int) (*zstd.Encoder, error) {
	if e, ok := encoders[class].Get().(*zstd.Encoder); ok {
		return e, nil
	}
	return zstd.NewWriter(nil,
		zstd.WithEncoderLevel(level),
		zstd.WithEncoderConcurrency(1),
		zstd.WithWindowSize(1<<(class+minWindowLog)),
		zstd.WithLowerEncoderMem(true),
		zstd.WithEncoderCRC(false),
		zstd.WithSingleSegment(true),
		zstd.WithZeroFrames(true),
		zstd.WithEncoderDictRaw(0, nil),
	)
}

// AppendEncode appends to dst the delta payload of doc against base: a
// zstd frame without its magic number. doc must not be empty.
// len(doc)+base.Size() must not exceed MaxSpan (ErrTooLarge).
func AppendEncode(dst, doc []byte, base *Base) ([]byte, error) {
	return appendEncode(dst, doc, base.d)
}

// appendEncode is AppendEncode against the dictionary dict: a base's D,
// or a reply's D_r (AppendReplyDict).
func appendEncode(dst, doc, dict []byte) ([]byte, error) {
	if len(doc) == 0 {
		return dst, errorf(ErrCorrupt, "empty document")
	}
	span := len(doc) + len(dict)
	if span > MaxSpan {
		return dst, errorf(ErrTooLarge, "dictionary of %d bytes and document of %d exceed %d", len(dict), len(doc), MaxSpan)
	}
	class := windowClass(span)
	enc, err := getEncoder(class)
	if err != nil {
		return dst, errorf(ErrCorrupt, "zstd encoder: %v", err)
	}
	if err := enc.ResetWithOptions(nil, zstd.WithEncoderDictRaw(0, dict)); err != nil {
		return dst, errorf(ErrCorrupt, "zstd encoder: %v", err)
	}
	start := len(dst)
	dst = enc.EncodeAll(doc, dst)
	// The pooled encoder keeps its reference to the base until its next
	// use or until the pool drops it at a garbage collection: resetting
	// it to no dictionary would cost another pass over its tables.
	encoders[class].Put(enc)
	n := copy(dst[start:], dst[start+len(magic):])
	return dst[:start+n], nil
}

var decoders = sync.Pool{New: func() any {
	d, err := zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(1),
		zstd.WithDecodeAllCapLimit(true),
		zstd.WithDecoderMaxMemory(frame.DefaultMaxDecompressed),
	)
	if err != nil {
		return err
	}
	return d
}}

// zstdHeader is what the frame header of a delta payload (magic omitted)
// states.
type zstdHeader struct {
	size   uint64 // Frame_Content_Size
	window uint64 // Window_Size: the content size in a single-segment frame
	len    int    // the header's length in bytes
}

// readHeader reads the frame header of a delta payload (magic omitted),
// refusing the parameters §4.3 excludes. Both segment modes are accepted:
// libzstd, and most zstd libraries, write a Window_Descriptor instead of
// Single_Segment_Flag once the document outgrows the level's window (2 MiB
// at level 3), and a reader bounds its memory by Frame_Content_Size, which
// both modes must state.
func readHeader(p []byte) (zstdHeader, error) {
	if len(p) == 0 {
		return zstdHeader{}, errorf(ErrCorrupt, "empty payload")
	}
	fhd := p[0]
	switch {
	case fhd&fhdReserved != 0:
		return zstdHeader{}, errorf(ErrCorrupt, "zstd frame header reserved bit set")
	case fhd&fhdDictID != 0:
		return zstdHeader{}, errorf(ErrCorrupt, "zstd frame names a dictionary id")
	case fhd&fhdSingleSegment == 0 && fhd>>6 == 0:
		return zstdHeader{}, errorf(ErrCorrupt, "zstd frame does not state its content size")
	}
	h := zstdHeader{len: 1}
	if fhd&fhdSingleSegment == 0 {
		if len(p) < 2 {
			return zstdHeader{}, errorf(ErrCorrupt, "zstd frame header truncated")
		}
		// RFC 8878 §3.1.1.1.2: 2^(10+Exponent) plus Mantissa eighths of it.
		exp, mantissa := uint64(p[1]>>3), uint64(p[1]&7)
		base := uint64(1) << (10 + exp)
		h.window = base + base/8*mantissa
		h.len++
	}
	n := fcsLen(fhd)
	if len(p) < h.len+n {
		return zstdHeader{}, errorf(ErrCorrupt, "zstd frame header truncated")
	}
	f := p[h.len:]
	switch n {
	case 1:
		h.size = uint64(f[0])
	case 2:
		h.size = uint64(binary.LittleEndian.Uint16(f)) + 256
	case 4:
		h.size = uint64(binary.LittleEndian.Uint32(f))
	default:
		h.size = binary.LittleEndian.Uint64(f)
	}
	h.len += n
	if fhd&fhdSingleSegment != 0 {
		h.window = h.size
	}
	return h, nil
}

// fcsLen is the Frame_Content_Size field's length for a frame header
// descriptor that states one (a single-segment frame always does).
func fcsLen(fhd byte) int {
	return [4]int{1, 2, 4, 8}[fhd>>6]
}

// maxBlock is Block_Maximum_Size's ceiling (RFC 8878 §3.1.1.2.4).
const maxBlock = 128 << 10

// frameLen walks the blocks of the zstd frame in p (magic omitted), whose
// header is h, and returns its length, so that nothing can follow it. It
// refuses blocks over Block_Maximum_Size (the smaller of Window_Size and
// 128 KiB), and a content size more than the blocks can produce: a few
// bytes cannot claim megabytes and have them allocated.
func frameLen(p []byte, h zstdHeader) (int, error) {
	blockMax := min(h.window, maxBlock)
	var bound uint64 // the most the blocks can decode to
	pos := h.len
	for {
		if len(p)-pos < 3 {
			return 0, errorf(ErrCorrupt, "zstd block header truncated")
		}
		bh := uint32(p[pos]) | uint32(p[pos+1])<<8 | uint32(p[pos+2])<<16
		pos += 3
		size := int(bh >> 3)
		if uint64(size) > blockMax {
			return 0, errorf(ErrCorrupt, "zstd block of %d bytes over the %d-byte maximum", size, blockMax)
		}
		switch bh >> 1 & 3 {
		case 0: // raw
			bound += uint64(size)
		case 1: // RLE: one byte stands for size bytes
			bound += uint64(size)
			size = 1
		case 2: // compressed: decodes to at most Block_Maximum_Size
			bound += blockMax
		case 3:
			return 0, errorf(ErrCorrupt, "zstd reserved block type")
		}
		if size > len(p)-pos {
			return 0, errorf(ErrCorrupt, "zstd block of %d bytes runs past the payload", size)
		}
		pos += size
		if bh&1 != 0 {
			break
		}
	}
	if p[0]&fhdChecksum != 0 {
		pos += 4
	}
	if bound < h.size {
		return 0, errorf(ErrCorrupt, "content size %d is more than the frame's blocks can hold (%d)", h.size, bound)
	}
	return pos, nil
}

// AppendDecode appends to dst the document that payload, a delta against
// base, stands for. The output is bounded by lim.MaxDecompressed before
// anything is allocated (the frame states its content size). It does not
// check the CRC-32 or that the document is JSON: AppendDecodeFrame does.
// On error dst is returned unchanged.
func AppendDecode(dst, payload []byte, base *Base, lim frame.Limits) ([]byte, error) {
	if base == nil {
		return dst, errorf(ErrNoBase, "no base to decode against")
	}
	return appendDecode(dst, payload, base.d, lim)
}

// appendDecode is AppendDecode against the dictionary dict.
func appendDecode(dst, payload, dict []byte, lim frame.Limits) ([]byte, error) {
	lim = lim.Effective()
	h, err := readHeader(payload)
	if err != nil {
		return dst, err
	}
	size := h.size
	if size > uint64(lim.MaxDecompressed) {
		return dst, errorf(frame.ErrLimit, "delta states a document of %d bytes, over the %d-byte limit", size, lim.MaxDecompressed)
	}
	if size == 0 {
		return dst, errorf(ErrCorrupt, "delta of an empty document")
	}
	n, err := frameLen(payload, h)
	if err != nil {
		return dst, err
	}
	if n != len(payload) {
		return dst, errorf(ErrCorrupt, "%d bytes after the zstd frame", len(payload)-n)
	}

	in := bufpool.Get(len(magic) + len(payload))
	defer bufpool.Put(in)
	*in = append((*in)[:0], magic[:]...)
	if payload[0]&fhdSingleSegment == 0 {
		// The decoder is handed a multi-segment frame as the single-segment
		// frame of the same content: Single_Segment_Flag set, the
		// Window_Descriptor dropped (the Frame_Content_Size field keeps its
		// length). Every offset valid under the frame's Window_Size is
		// valid in a window of the whole content, so the output is the
		// same, and the decoder sizes what it holds by Frame_Content_Size,
		// checked above, never by a Window_Size the sender chose.
		*in = append(append(*in, payload[0]|fhdSingleSegment), payload[2:]...)
	} else {
		*in = append(*in, payload...)
	}

	v := decoders.Get()
	dec, ok := v.(*zstd.Decoder)
	if !ok {
		return dst, errorf(ErrCorrupt, "zstd decoder: %v", v)
	}
	// The pooled decoder keeps its reference to the dictionary until its
	// next use or until the pool drops it at a garbage collection, as the
	// encoders do: deleting it costs another reset, five allocations.
	defer decoders.Put(dec)
	// The output is bounded three times over: by its stated size (checked
	// above; the decoder refuses to exceed it), by the capacity given
	// (WithDecodeAllCapLimit), and by the memory limit, which the decoder
	// compares with the stated size plus what dst already holds (and with
	// its 1 KiB minimum window).
	start := len(dst)
	maxMem := uint64(start) + max(size, zstd.MinWindowSize)
	if err := dec.ResetWithOptions(nil, zstd.WithDecoderDictRaw(0, dict), zstd.WithDecoderMaxMemory(maxMem)); err != nil {
		return dst, errorf(ErrCorrupt, "zstd decoder: %v", err)
	}
	out := slices.Grow(dst, int(size))
	out, err = dec.DecodeAll(*in, out)
	if err != nil {
		return dst[:start], errorf(ErrCorrupt, "%v", err)
	}
	if uint64(len(out)-start) != size {
		return dst[:start], errorf(ErrCorrupt, "decoded %d bytes, the frame says %d", len(out)-start, size)
	}
	return out, nil
}
