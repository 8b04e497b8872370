package delta

import (
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/m2md/m2md/frame"
)

// BenchmarkTurn measures one operation as every delta turn of the corpus
// (33 turns) encoded by the requester and decoded by the provider, side by
// side with the same turns as per-message M2M v1 frames (Brotli q5):
//
//	go test ./delta -run '^$' -bench Turn -count 6 | benchstat -col /codec -
//
// The delta side includes building each Base (one copy of the base request
// and response) as both ends do once per turn.
func BenchmarkTurn(b *testing.B) {
	var turns []struct {
		prev turn
		doc  []byte
	}
	size := 0
	for _, conv := range conversations(b) {
		for i := 1; i < len(conv); i++ {
			turns = append(turns, struct {
				prev turn
				doc  []byte
			}{conv[i-1], conv[i].request})
			size += len(conv[i].request)
		}
	}
	enc := make([]byte, 0, 1<<20)
	dec := make([]byte, 0, 1<<20)
	run := func(b *testing.B, one func(prev turn, doc []byte) error) {
		b.SetBytes(int64(size))
		b.ReportAllocs()
		for b.Loop() {
			for _, t := range turns {
				if err := one(t.prev, t.doc); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.Run("codec=brotli-q5", func(b *testing.B) {
		run(b, func(_ turn, doc []byte) error {
			fr, err := frame.AppendEncode(enc[:0], doc, frame.Limits{})
			if err != nil {
				return err
			}
			_, err = frame.AppendDecode(dec[:0], fr, frame.Limits{})
			return err
		})
	})
	for _, l := range []zstd.EncoderLevel{zstd.SpeedFastest, zstd.SpeedDefault, zstd.SpeedBetterCompression, zstd.SpeedBestCompression} {
		b.Run("codec=delta-"+l.String(), func(b *testing.B) {
			defer setLevel(setLevel(l))
			run(b, func(prev turn, doc []byte) error {
				base := NewBase(prev.request, prev.response)
				fr, _, err := AppendEncodeFrame(enc[:0], doc, frame.Extension{DocID: 2, BaseID: 1}, base, frame.Limits{})
				if err != nil {
					return err
				}
				base = NewBase(prev.request, prev.response)
				_, err = AppendDecodeFrame(dec[:0], fr, base, frame.Limits{})
				return err
			})
		})
	}
}

// setLevel switches the encoders' level (emptying their pools) and
// returns the previous one.
func setLevel(l zstd.EncoderLevel) zstd.EncoderLevel {
	old := level
	level = l
	for i := range encoders {
		encoders[i] = syncPool()
	}
	return old
}

// BenchmarkCorpusSize reports, for each zstd level, the corpus figures of
// TestCorpusRoundTrip as metrics (docs/benchmarks.md):
//
//	go test ./delta -run '^$' -bench CorpusSize -benchtime 1x
func BenchmarkCorpusSize(b *testing.B) {
	for _, l := range []zstd.EncoderLevel{zstd.SpeedFastest, zstd.SpeedDefault, zstd.SpeedBetterCompression, zstd.SpeedBestCompression} {
		b.Run("level="+l.String(), func(b *testing.B) {
			defer setLevel(setLevel(l))
			var j, f, p int
			for b.Loop() {
				j, f, p = corpusRoundTrip(b)
			}
			b.ReportMetric(float64(f), "frame-B")
			b.ReportMetric(float64(p), "delta-payload-B")
			b.ReportMetric(float64(j)/float64(f), "x-smaller")
		})
	}
}

// BenchmarkReplyCorpusSize reports, for each zstd level, the corpus
// responses as reply deltas (TestReplyCorpusRoundTrip) as metrics, beside
// the same responses as plain M2M v1 frames (docs/benchmarks.md):
//
//	go test ./delta -run '^$' -bench ReplyCorpusSize -benchtime 1x
func BenchmarkReplyCorpusSize(b *testing.B) {
	for _, l := range []zstd.EncoderLevel{zstd.SpeedFastest, zstd.SpeedDefault, zstd.SpeedBetterCompression, zstd.SpeedBestCompression} {
		b.Run("level="+l.String(), func(b *testing.B) {
			defer setLevel(setLevel(l))
			var j, f, p, n int
			for b.Loop() {
				j, f, p, n = replyCorpus(b)
			}
			b.ReportMetric(float64(f), "frame-B")
			b.ReportMetric(float64(p), "plain-frame-B")
			b.ReportMetric(float64(n), "reply-deltas")
			b.ReportMetric(float64(j)/float64(f), "x-smaller")
		})
	}
}

// BenchmarkReplyTurn measures one operation as every corpus response (36)
// encoded by its provider and decoded by its requester: as per-message M2M
// v1 frames (Brotli q5) and as reply deltas at each zstd level, building
// D_r (one copy of the base response and the request) at both ends as the
// client does:
//
//	go test ./delta -run '^$' -bench ReplyTurn -count 6 | benchstat -col /codec -
func BenchmarkReplyTurn(b *testing.B) {
	type reply struct {
		base      *Base
		req, resp []byte
	}
	var replies []reply
	size := 0
	for _, conv := range conversations(b) {
		for i, cur := range conv {
			var base *Base
			if i > 0 {
				base = NewBase(conv[i-1].request, conv[i-1].response)
			}
			replies = append(replies, reply{base, cur.request, cur.response})
			size += len(cur.response)
		}
	}
	enc := make([]byte, 0, 1<<20)
	dec := make([]byte, 0, 1<<20)
	dict := make([]byte, 0, 1<<20)
	run := func(b *testing.B, one func(r reply) error) {
		b.SetBytes(int64(size))
		b.ReportAllocs()
		for b.Loop() {
			for _, r := range replies {
				if err := one(r); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.Run("codec=brotli-q5", func(b *testing.B) {
		run(b, func(r reply) error {
			fr, err := frame.AppendEncode(enc[:0], r.resp, frame.Limits{})
			if err != nil {
				return err
			}
			_, err = frame.AppendDecode(dec[:0], fr, frame.Limits{})
			return err
		})
	})
	for _, l := range []zstd.EncoderLevel{zstd.SpeedFastest, zstd.SpeedDefault, zstd.SpeedBetterCompression} {
		b.Run("codec=reply-delta-"+l.String(), func(b *testing.B) {
			defer setLevel(setLevel(l))
			run(b, func(r reply) error {
				d := AppendReplyDict(dict[:0], r.base, r.req)
				fr, isDelta, err := AppendEncodeReply(enc[:0], r.resp, d, frame.Limits{})
				if err != nil {
					return err
				}
				if !isDelta {
					_, err = frame.AppendDecode(dec[:0], fr, frame.Limits{})
					return err
				}
				d = AppendReplyDict(dict[:0], r.base, r.req)
				_, err = AppendDecodeReply(dec[:0], fr, d, frame.Limits{})
				return err
			})
		})
	}
}
