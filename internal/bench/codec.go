package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// DefaultMinTime is how long each encode and each decode is repeated, at
// least, to time it.
const DefaultMinTime = 10 * time.Millisecond

// CodecConfig describes a codec comparison.
type CodecConfig struct {
	// Payloads are the documents to compare (LoadCorpus).
	Payloads []Payload
	// MinTime is how long each encode and decode is repeated to time it;
	// default 10 ms. The figure is the mean over the repetitions.
	MinTime time.Duration
	// Progress, when set, is called after each document with the number
	// done and the total.
	Progress func(done, total int)
}

// CodecRow is one document in one form.
type CodecRow struct {
	File      string  `json:"file"`
	Class     string  `json:"class"`
	JSONBytes int     `json:"json_bytes"`
	Form      string  `json:"form"`
	WireBytes int     `json:"wire_bytes"`
	ByteRatio float64 `json:"byte_ratio"` // wire bytes / JSON bytes
	// Tokens is the cl100k token count of the wire form; nil for binary
	// forms, which cannot be put in a prompt as they are.
	Tokens   *int    `json:"tokens"`
	EncodeUS float64 `json:"encode_us"`
	DecodeUS float64 `json:"decode_us"`
}

// CodecSummary totals one size class in one form.
type CodecSummary struct {
	Class      string  `json:"class"`
	Form       string  `json:"form"`
	Files      int     `json:"files"`
	JSONBytes  int64   `json:"json_bytes"`
	WireBytes  int64   `json:"wire_bytes"`
	ByteRatio  float64 `json:"byte_ratio"` // total wire bytes / total JSON bytes
	JSONTokens int64   `json:"json_tokens"`
	// Tokens and TokenRatio are absent for binary forms.
	Tokens     *int64   `json:"tokens"`
	TokenRatio *float64 `json:"token_ratio"`
	// EncodeUS and DecodeUS are the mean time per document.
	EncodeUS float64 `json:"encode_us"`
	DecodeUS float64 `json:"decode_us"`
	// EncodeMBps is JSON megabytes (10^6) encoded per second.
	EncodeMBps float64 `json:"encode_mb_per_s"`
	DecodeMBps float64 `json:"decode_mb_per_s"`
}

// CodecReport is the outcome of RunCodec.
type CodecReport struct {
	Machine   Machine        `json:"machine"`
	Files     int            `json:"files"`
	MinTimeMS float64        `json:"min_time_ms"`
	Forms     []string       `json:"forms"`
	Classes   []string       `json:"classes"`
	Rows      []CodecRow     `json:"rows"`
	Summary   []CodecSummary `json:"summary"`
}

// Size classes of the summary, as the corpus README names them.
const classAll = "all"

var sizeClasses = []struct {
	name  string
	below int
}{
	{"tiny", 400},
	{"1k", 1536},
	{"4k", 6 << 10},
	{"16k", 32 << 10},
	{"100k", 1 << 62},
}

// sizeClass names the size class of a document of n bytes: tiny (< 400 B),
// 1k (< 1.5 KiB), 4k (< 6 KiB), 16k (< 32 KiB) or 100k.
func sizeClass(n int) string {
	for _, c := range sizeClasses {
		if n < c.below {
			return c.name
		}
	}
	return sizeClasses[len(sizeClasses)-1].name
}

// ErrRoundTrip reports a form that did not give the document back byte for
// byte.
var ErrRoundTrip = errors.New("bench: round trip mismatch")

// RunCodec encodes every payload in every form, checks that each decodes
// back to the same bytes, counts the bytes and the cl100k tokens of the
// wire form and times encoding and decoding.
func RunCodec(ctx context.Context, cfg CodecConfig) (*CodecReport, error) {
	forms, err := newForms()
	if err != nil {
		return nil, err
	}
	return runCodec(ctx, cfg, forms)
}

func runCodec(ctx context.Context, cfg CodecConfig, forms []form) (*CodecReport, error) {
	if len(cfg.Payloads) == 0 {
		return nil, fmt.Errorf("%w: no documents to compare", ErrPayload)
	}
	if cfg.MinTime <= 0 {
		cfg.MinTime = DefaultMinTime
	}
	tc, err := newTokenCounter()
	if err != nil {
		return nil, err
	}
	rep := &CodecReport{Machine: machine(), Files: len(cfg.Payloads), MinTimeMS: float64(cfg.MinTime) / 1e6}
	for _, f := range forms {
		rep.Forms = append(rep.Forms, f.name)
	}
	var wire, back []byte
	for i, p := range cfg.Payloads {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		for _, f := range forms {
			wire, err = f.enc(wire[:0], p.JSON)
			if err != nil {
				return nil, fmt.Errorf("bench: %s: encode %s: %w", p.Name, f.name, err)
			}
			back, err = f.dec(back[:0], wire)
			if err != nil {
				return nil, fmt.Errorf("bench: %s: decode %s: %w", p.Name, f.name, err)
			}
			if !bytes.Equal(back, p.JSON) {
				return nil, fmt.Errorf("%w: %s in form %s gives %d bytes back, not the %d sent", ErrRoundTrip, p.Name, f.name, len(back), len(p.JSON))
			}
			row := CodecRow{
				File:      p.Name,
				Class:     sizeClass(len(p.JSON)),
				JSONBytes: len(p.JSON),
				Form:      f.name,
				WireBytes: len(wire),
				ByteRatio: float64(len(wire)) / float64(len(p.JSON)),
			}
			if f.text {
				n, err := tc.count(wire)
				if err != nil {
					return nil, fmt.Errorf("bench: %s: tokens of %s: %w", p.Name, f.name, err)
				}
				row.Tokens = &n
			}
			if f.name != formJSON { // raw JSON costs nothing to "encode"
				wireCopy := append([]byte(nil), wire...)
				row.EncodeUS = timeOp(cfg.MinTime, func() { wire, _ = f.enc(wire[:0], p.JSON) })
				row.DecodeUS = timeOp(cfg.MinTime, func() { back, _ = f.dec(back[:0], wireCopy) })
			}
			rep.Rows = append(rep.Rows, row)
		}
		if cfg.Progress != nil {
			cfg.Progress(i+1, len(cfg.Payloads))
		}
	}
	rep.summarize()
	return rep, nil
}

// timeOp returns the time of op in microseconds: the median of five
// batches that each last at least minTime/5, so that one batch slowed down
// by the machine's other work does not move the figure, and reading the
// clock does not dominate fast operations.
func timeOp(minTime time.Duration, op func()) float64 {
	const batches = 5
	target := minTime / batches
	batch := func(n int) time.Duration {
		start := time.Now()
		for range n {
			op()
		}
		return time.Since(start)
	}
	n := 1
	for {
		el := batch(n)
		if el >= target || n >= 1<<24 {
			break
		}
		next := n * 100
		if el > 0 {
			next = min(int(float64(n)*1.2*float64(target)/float64(el))+1, n*100)
		}
		n = max(next, n+1)
	}
	per := make([]float64, batches)
	for i := range per {
		per[i] = float64(batch(n)) / float64(n) / 1e3
	}
	slices.Sort(per)
	return per[batches/2]
}

// summarize totals the rows per size class and over all documents.
func (r *CodecReport) summarize() {
	type key struct{ class, form string }
	sums := make(map[key]*CodecSummary)
	jsonTok := make(map[string]int64) // file → JSON tokens
	for _, row := range r.Rows {
		if row.Form == formJSON && row.Tokens != nil {
			jsonTok[row.File] = int64(*row.Tokens)
		}
	}
	present := map[string]bool{}
	for _, row := range r.Rows {
		present[row.Class] = true
		for _, class := range []string{row.Class, classAll} {
			k := key{class, row.Form}
			s := sums[k]
			if s == nil {
				s = &CodecSummary{Class: class, Form: row.Form}
				sums[k] = s
			}
			s.Files++
			s.JSONBytes += int64(row.JSONBytes)
			s.WireBytes += int64(row.WireBytes)
			s.JSONTokens += jsonTok[row.File]
			if row.Tokens != nil {
				if s.Tokens == nil {
					s.Tokens = new(int64)
				}
				*s.Tokens += int64(*row.Tokens)
			}
			s.EncodeUS += row.EncodeUS
			s.DecodeUS += row.DecodeUS
		}
	}
	r.Classes = nil
	for _, c := range sizeClasses {
		if present[c.name] {
			r.Classes = append(r.Classes, c.name)
		}
	}
	r.Classes = append(r.Classes, classAll)
	r.Summary = nil
	for _, class := range r.Classes {
		for _, f := range r.Forms {
			s := sums[key{class, f}]
			if s == nil {
				continue
			}
			s.ByteRatio = float64(s.WireBytes) / float64(s.JSONBytes)
			if s.Tokens != nil && s.JSONTokens > 0 {
				v := float64(*s.Tokens) / float64(s.JSONTokens)
				s.TokenRatio = &v
			}
			totalEnc, totalDec := s.EncodeUS, s.DecodeUS
			s.EncodeUS /= float64(s.Files)
			s.DecodeUS /= float64(s.Files)
			if totalEnc > 0 {
				s.EncodeMBps = float64(s.JSONBytes) / totalEnc
			}
			if totalDec > 0 {
				s.DecodeMBps = float64(s.JSONBytes) / totalDec
			}
			r.Summary = append(r.Summary, *s)
		}
	}
}
