package codec

import (
	"bytes"
	"encoding/base64"
	"fmt"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/frame/legacy"
	"github.com/m2md/m2md/security"
	"github.com/m2md/m2md/tokennative"
)

// Config configures a Codec. The zero value has the wire reference's limits
// and the cl100k and o200k tokenizers (Llama 3 needs Tokens.Llama3Path).
type Config struct {
	Limits frame.Limits
	Tokens tokennative.Config
}

// Codec encodes and decodes every wire form. It is safe for concurrent use.
type Codec struct {
	lim frame.Limits
	tk  *tokennative.Codec
}

// New returns a Codec.
func New(cfg Config) *Codec {
	return &Codec{lim: cfg.Limits, tk: tokennative.New(cfg.Tokens)}
}

// Tokens returns the TokenNative codec, e.g. to list available encodings.
func (c *Codec) Tokens() *tokennative.Codec { return c.tk }

// EncodeOptions chooses the wire form.
type EncodeOptions struct {
	// Algorithm is the form to write; Auto picks one with Select.
	Algorithm Algorithm
	Auto      bool
	// Encoding is the TokenNative tokenizer. Default cl100k.
	Encoding tokennative.Encoding
	// Binary writes the raw binary shape (M2M v1 and TokenNative only).
	Binary bool
	// Security protects an M2M v1 frame with Key (HMAC: ≥ 16 bytes; AEAD:
	// 32 bytes).
	Security frame.Security
	Key      []byte
}

// Encoded describes what Encode wrote.
type Encoded struct {
	Algorithm Algorithm
	// Reason says why Auto chose the algorithm ("" when not Auto).
	Reason string
}

// Encode appends the wire form of data to dst.
func (c *Codec) Encode(dst, data []byte, opt EncodeOptions) ([]byte, Encoded, error) {
	info := Encoded{Algorithm: opt.Algorithm}
	if opt.Auto {
		info.Algorithm, info.Reason = selectFor(data, opt)
	}
	if opt.Security != frame.SecurityNone && info.Algorithm != M2M {
		return dst, info, fmt.Errorf("%w: security mode %s applies to M2M v1 frames only, not %s", ErrUnsupported, opt.Security, info.Algorithm)
	}
	if opt.Binary && info.Algorithm != M2M && info.Algorithm != TokenNative {
		return dst, info, fmt.Errorf("%w: %s has no binary shape", ErrUnsupported, info.Algorithm)
	}
	var (
		out []byte
		err error
	)
	switch info.Algorithm {
	case None:
		out = append(dst, data...)
	case M2M:
		out, err = c.encodeM2M(dst, data, opt)
	case TokenNative:
		if opt.Binary {
			out, err = c.tk.AppendBinary(dst, opt.Encoding, data)
		} else {
			out, err = c.tk.AppendText(dst, opt.Encoding, data)
		}
	case Brotli:
		out, err = frame.AppendEncodeBrotliText(dst, data, c.lim)
	case T1:
		out, err = legacy.EncodeT1(dst, data, legacy.T1Options{Limits: c.lim})
	case Zlib:
		out, err = legacy.EncodeZlib(dst, data, c.lim)
	case Dictionary:
		out, err = legacy.EncodeDictionary(dst, data, c.lim)
	default:
		return dst, info, fmt.Errorf("%w: %d", ErrUnknownAlgorithm, info.Algorithm)
	}
	if err != nil {
		return dst, info, err
	}
	return out, info, nil
}

func (c *Codec) encodeM2M(dst, data []byte, opt EncodeOptions) ([]byte, error) {
	if opt.Security == frame.SecurityNone {
		if opt.Binary {
			return frame.AppendEncode(dst, data, c.lim)
		}
		return frame.AppendEncodeText(dst, data, c.lim)
	}
	plain, err := frame.AppendEncode(nil, data, c.lim)
	if err != nil {
		return nil, err
	}
	prot, err := security.Protect(nil, plain, opt.Security, opt.Key)
	if err != nil {
		return nil, err
	}
	if opt.Binary {
		return append(dst, prot...), nil
	}
	return appendText(dst, prot), nil
}

// appendText turns a binary M2M v1 frame into its text shape.
func appendText(dst, bin []byte) []byte {
	rest := bin[frame.PrefixLen:]
	dst = append(dst, frame.Prefix...)
	n := len(dst)
	dst = append(dst, make([]byte, base64.StdEncoding.EncodedLen(len(rest)))...)
	base64.StdEncoding.Encode(dst[n:], rest)
	return dst
}

// DecodeOptions tell Decode what it cannot detect.
type DecodeOptions struct {
	// Key verifies or decrypts protected M2M v1 frames.
	Key []byte
	// TokenNativeBinary decodes the input as the prefix-less binary
	// TokenNative shape (its first byte names the tokenizer).
	TokenNativeBinary bool
}

// Decoded describes what Decode found.
type Decoded struct {
	Algorithm Algorithm
	// Binary reports the binary shape (M2M v1, TokenNative).
	Binary bool
	// Security is the M2M v1 frame's protection.
	Security frame.Security
	// Encoding is the TokenNative tokenizer.
	Encoding tokennative.Encoding
}

// Decode detects the wire form of wire and appends the original content to
// dst. On error dst is returned unchanged.
func (c *Codec) Decode(dst, wire []byte, opt DecodeOptions) ([]byte, Decoded, error) {
	var (
		info Decoded
		out  []byte
		err  error
	)
	if opt.TokenNativeBinary {
		info.Algorithm, info.Binary = TokenNative, true
		out, info.Encoding, err = c.tk.DecodeBinary(dst, wire)
		return result(dst, out, info, err)
	}
	switch {
	case bytes.HasPrefix(wire, []byte(frame.Prefix)):
		info.Algorithm = M2M
		out, info, err = c.decodeM2M(dst, wire, opt, info)
	case bytes.HasPrefix(wire, []byte(tokennative.TextPrefix)):
		info.Algorithm = TokenNative
		out, info.Encoding, err = c.tk.DecodeText(dst, wire)
	case bytes.HasPrefix(wire, []byte("#M2M[v3.0]|")):
		info.Algorithm = Brotli
		out, err = frame.AppendDecodeBrotliText(dst, wire, c.lim)
	case bytes.HasPrefix(wire, []byte(legacy.PrefixT1)):
		info.Algorithm = T1
		out, err = legacy.DecodeT1(dst, wire, c.lim)
	case bytes.HasPrefix(wire, []byte("#M2M[v2.0]|")):
		info.Algorithm = Zlib
		out, err = legacy.DecodeZlib(dst, wire, c.lim)
	case bytes.HasPrefix(wire, []byte(legacy.PrefixDictionary)):
		info.Algorithm = Dictionary
		out, err = legacy.DecodeDictionary(dst, wire, c.lim)
	default:
		info.Algorithm = None
		if lim := c.lim.Effective().MaxMessage; len(wire) > lim {
			return dst, info, fmt.Errorf("%w: %d bytes exceed the %d-byte message limit", frame.ErrLimit, len(wire), lim)
		}
		out = append(dst, wire...)
	}
	return result(dst, out, info, err)
}

func result(dst, out []byte, info Decoded, err error) ([]byte, Decoded, error) {
	if err != nil {
		return dst, info, err
	}
	return out, info, nil
}

// IsBinaryM2M reports whether an input that starts with "#M2M|1|" is in the
// binary shape. The text shape has a Base64 character at offset 9, where the
// binary shape has the schema byte (01, 02, …, never a Base64 character).
func IsBinaryM2M(wire []byte) bool {
	return len(wire) > 9 && !isBase64Char(wire[9])
}

func isBase64Char(b byte) bool {
	return b >= 'A' && b <= 'Z' || b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '+' || b == '/' || b == '='
}

func (c *Codec) decodeM2M(dst, wire []byte, opt DecodeOptions, info Decoded) ([]byte, Decoded, error) {
	bin := wire
	info.Binary = IsBinaryM2M(wire)
	if !info.Binary {
		var err error
		if bin, err = textToBinary(wire, c.lim); err != nil {
			return dst, info, err
		}
	}
	mode, err := security.Mode(bin)
	if err != nil {
		return dst, info, err
	}
	info.Security = mode
	if mode != frame.SecurityNone {
		if len(opt.Key) == 0 {
			return dst, info, fmt.Errorf("%w: frame is %s-protected", ErrKeyRequired, mode)
		}
		if bin, _, err = security.Open(nil, bin, opt.Key); err != nil {
			return dst, info, err
		}
	}
	out, err := frame.AppendDecode(dst, bin, c.lim)
	return out, info, err
}

// textToBinary decodes the text shape of an M2M v1 frame into the binary
// shape, as strictly as the Rust decoder (canonical padding, no line breaks).
func textToBinary(text []byte, lim frame.Limits) ([]byte, error) {
	if max := lim.Effective().MaxMessage; len(text) > max {
		return nil, fmt.Errorf("%w: %d bytes exceed the %d-byte message limit", frame.ErrLimit, len(text), max)
	}
	rest := text[frame.PrefixLen:]
	if bytes.ContainsAny(rest, "\r\n") {
		return nil, fmt.Errorf("%w: line break in Base64 body", ErrMalformed)
	}
	bin := make([]byte, frame.PrefixLen+base64.StdEncoding.DecodedLen(len(rest)))
	copy(bin, frame.Prefix)
	n, err := base64.StdEncoding.Strict().Decode(bin[frame.PrefixLen:], rest)
	if err != nil {
		return nil, fmt.Errorf("%w: Base64 body: %v", ErrMalformed, err)
	}
	return bin[:frame.PrefixLen+n], nil
}
