package client

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/tokennative"
)

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

// decodeTokenNative decodes a received binary TokenNative frame.
func (s *session) decodeTokenNative(fr []byte) ([]byte, error) {
	body, _, err := s.tokens().DecodeBinary(nil, fr)
	if err != nil {
		s.c.stats.badFrames.Add(1)
		return nil, fmt.Errorf("%w: %w", ErrBadFrame, err)
	}
	s.c.stats.jsonReceived.Add(uint64(len(body)))
	return body, nil
}
