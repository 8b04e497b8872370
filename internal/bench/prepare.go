package bench

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/tokennative"
)

// Algorithms a load run can send.
const (
	AlgorithmM2M         = "m2m"
	AlgorithmTokenNative = "tokennative"
)

// prepared is a payload encoded once, before the run, into the frame every
// request carrying it sends.
type prepared struct {
	name string
	json int // size of the JSON document
	// frame is a plain (security 00) binary M2M v1 frame, or a binary
	// TokenNative frame.
	frame       []byte
	tokenNative bool
	// model is the routing header's model; "" when the frame has none
	// (responses, chunks, TokenNative), and the request is then addressed
	// to a provider by agent id.
	model string
}

// prepare encodes payloads for algorithm.
func prepare(payloads []Payload, algorithm string, enc tokennative.Encoding) ([]prepared, error) {
	var tn *tokennative.Codec
	if algorithm == AlgorithmTokenNative {
		tn = tokennative.New(tokennative.Config{})
	}
	out := make([]prepared, 0, len(payloads))
	for _, p := range payloads {
		pp := prepared{name: p.Name, json: len(p.JSON)}
		switch algorithm {
		case AlgorithmM2M:
			fr, err := frame.AppendEncode(nil, p.JSON, frame.Limits{})
			if err != nil {
				return nil, fmt.Errorf("%w: %s: %v", ErrPayload, p.Name, err)
			}
			pp.frame = fr
			var h frame.Header
			if err := frame.ReadHeader(fr, &h); err == nil &&
				(h.Schema == frame.SchemaRequest || h.Schema == frame.SchemaEmbeddingRequest) && len(h.Model) > 0 {
				pp.model = string(h.Model)
			}
		case AlgorithmTokenNative:
			fr, err := tn.AppendBinary(nil, enc, p.JSON)
			if err != nil {
				return nil, fmt.Errorf("%w: %s: %v", ErrPayload, p.Name, err)
			}
			pp.frame = fr
			pp.tokenNative = true
		default:
			return nil, fmt.Errorf("bench: unknown algorithm %q (want %s or %s)", algorithm, AlgorithmM2M, AlgorithmTokenNative)
		}
		out = append(out, pp)
	}
	return out, nil
}

// models lists the distinct routing models of ps.
func models(ps []prepared) []string {
	var out []string
	for _, p := range ps {
		if p.model != "" && !slices.Contains(out, p.model) {
			out = append(out, p.model)
		}
	}
	return out
}

// sameFrame reports whether a received plain frame is the echo of want:
// equal except for the sequence number and channel id, which every hop
// rewrites.
func sameFrame(got, want []byte, tokenNative bool) bool {
	if tokenNative {
		return bytes.Equal(got, want)
	}
	const from, to = frame.OffSequence, frame.OffChannel + 4
	return len(got) == len(want) && len(got) >= to &&
		bytes.Equal(got[:from], want[:from]) && bytes.Equal(got[to:], want[to:])
}

// tagLen is the size of the request tag that the bare relay and the echo
// target carry in front of each payload: the only thing they read.
const tagLen = 8

func putTag(b []byte, id uint64) { binary.BigEndian.PutUint64(b, id) }

func readTag(b []byte) uint64 { return binary.BigEndian.Uint64(b) }
