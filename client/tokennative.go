package client

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/tokennative"
)

// errEmptyTokenNative: a TokenNative frame of only its tokenizer byte.
var errEmptyTokenNative = errors.New("TokenNative frame carries no tokens (an empty body is no JSON document)")

var defaultTokens = sync.OnceValue(func() *tokennative.Codec { return tokennative.New(tokennative.Config{}) })

// tokens is the client's TokenNative codec (cl100k and o200k when the
// configuration names no Llama 3 vocabulary).
func (s *session) tokens() *tokennative.Codec {
	if t := s.c.cfg.tokens; t != nil {
		return t
	}
	return defaultTokens()
}

// tokenEncoding maps the negotiated encoding name to the tokenizer.
func tokenEncoding(e negotiate.Encoding) (tokennative.Encoding, error) {
	switch e {
	case negotiate.EncodingCl100k, "":
		return tokennative.Cl100k, nil
	case negotiate.EncodingO200k:
		return tokennative.O200k, nil
	case negotiate.EncodingLlamaBPE:
		return tokennative.Llama3, nil
	}
	return 0, fmt.Errorf("%w: encoding %q", ErrUnsupportedFrame, e)
}

// encodeTokenNative appends the binary TokenNative frame of body, in the
// session's negotiated encoding.
func (s *session) encodeTokenNative(o outgoing, body []byte, to string) error {
	if to == "" {
		return fmt.Errorf("%w: a TokenNative request has no routing header: address it with To", ErrUnsupportedFrame)
	}
	if !slices.Contains(s.info.Params.Algorithms, negotiate.AlgorithmTokenNative) {
		return fmt.Errorf("%w: the session did not negotiate tokennative", ErrUnsupportedFrame)
	}
	if len(body) == 0 {
		// Receivers refuse a frame without tokens (docs/protocol.md §4),
		// as the M2M v1 encoder refuses an empty document.
		return errors.New("client: tokennative: empty body: a request body is a JSON document")
	}
	enc, err := tokenEncoding(s.info.Params.Encoding)
	if err != nil {
		return err
	}
	b, err := s.tokens().AppendBinary(*o.buf, enc, body)
	if err != nil {
		if errors.Is(err, tokennative.ErrLimit) {
			return fmt.Errorf("%w: %w", ErrTooLarge, err)
		}
		return fmt.Errorf("client: tokennative: %w", err)
	}
	*o.buf = b
	return nil
}

// decodeTokenNative decodes a received binary TokenNative frame. A frame
// without tokens is refused: it decodes to the empty text, which is no
// JSON body (docs/protocol.md §4), and a caller must never take an empty
// body for an answer.
func (s *session) decodeTokenNative(fr []byte) ([]byte, error) {
	body, _, err := s.tokens().DecodeBinary(nil, fr)
	if err == nil && len(body) == 0 {
		err = errEmptyTokenNative
	}
	if err != nil {
		s.c.stats.badFrames.Add(1)
		return nil, fmt.Errorf("%w: %w", ErrBadFrame, err)
	}
	s.c.stats.jsonReceived.Add(uint64(len(body)))
	return body, nil
}
