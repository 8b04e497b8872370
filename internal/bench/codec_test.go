package bench

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/csv"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/testkit"
	"github.com/m2md/m2md/tokennative"
)

func corpusPayloads(t *testing.T, names ...string) []Payload {
	t.Helper()
	var ps []Payload
	for _, n := range names {
		ps = append(ps, Payload{Name: n, JSON: testkit.CorpusFile(t, n)})
	}
	return ps
}

// TestCodecComparisonBytes recomputes every form's size independently of
// the comparison's own (reused) encoders, for a few corpus documents on
// both sides of the 100-byte compression threshold.
func TestCodecComparisonBytes(t *testing.T) {
	ps := corpusPayloads(t, "req-chat-tiny-08.json", "req-chat-1k-03.json", "resp-chat-06.json", "stream-chunk-07.json")
	rep, err := RunCodec(context.Background(), CodecConfig{Payloads: ps, MinTime: 50 * time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != len(ps)*len(formNames()) {
		t.Fatalf("%d rows, want %d", len(rep.Rows), len(ps)*len(formNames()))
	}
	tn := tokennative.New(tokennative.Config{})
	cl, err := tn.Tokenizer(tokennative.Cl100k)
	if err != nil {
		t.Fatal(err)
	}
	want := func(p Payload, f string) (int, int) {
		var b []byte
		switch f {
		case formJSON:
			b = p.JSON
		case formGzipBase64:
			var buf bytes.Buffer
			w, _ := gzip.NewWriterLevel(&buf, gzip.DefaultCompression)
			w.Write(p.JSON)
			w.Close()
			b = []byte(base64.StdEncoding.EncodeToString(buf.Bytes()))
		case formBrotliBase64:
			var buf bytes.Buffer
			w := brotli.NewWriterLevel(&buf, 5)
			w.Write(p.JSON)
			w.Close()
			b = []byte(base64.StdEncoding.EncodeToString(buf.Bytes()))
		case formZstd:
			enc, _ := zstd.NewWriter(nil)
			b = enc.EncodeAll(p.JSON, nil)
		case formM2MBinary:
			b, err = frame.AppendEncode(nil, p.JSON, frame.Limits{})
		case formM2MText:
			b, err = frame.AppendEncodeText(nil, p.JSON, frame.Limits{})
		case formTNCl100kBin:
			b, err = tn.AppendBinary(nil, tokennative.Cl100k, p.JSON)
		case formTNCl100kText:
			b, err = tn.AppendText(nil, tokennative.Cl100k, p.JSON)
		case formTNO200kBinary:
			b, err = tn.AppendBinary(nil, tokennative.O200k, p.JSON)
		case formTNO200kText:
			b, err = tn.AppendText(nil, tokennative.O200k, p.JSON)
		}
		if err != nil {
			t.Fatal(err)
		}
		if !isText(f) {
			return len(b), -1
		}
		ids, err := cl.Encode(nil, b)
		if err != nil {
			t.Fatal(err)
		}
		return len(b), len(ids)
	}
	for _, row := range rep.Rows {
		var p Payload
		for _, q := range ps {
			if q.Name == row.File {
				p = q
			}
		}
		n, tokens := want(p, row.Form)
		if row.WireBytes != n {
			t.Errorf("%s %s: %d bytes, want %d", row.File, row.Form, row.WireBytes, n)
		}
		if row.JSONBytes != len(p.JSON) || row.Class != sizeClass(len(p.JSON)) {
			t.Errorf("%s: json %d class %s", row.File, row.JSONBytes, row.Class)
		}
		text := isText(row.Form)
		switch {
		case text && row.Tokens == nil:
			t.Errorf("%s %s: no token count", row.File, row.Form)
		case text && *row.Tokens != tokens:
			t.Errorf("%s %s: %d tokens, want %d", row.File, row.Form, *row.Tokens, tokens)
		case !text && row.Tokens != nil:
			t.Errorf("%s %s: binary form with a token count", row.File, row.Form)
		}
		if row.Form != formJSON && (row.EncodeUS <= 0 || row.DecodeUS <= 0) {
			t.Errorf("%s %s: not timed (%g, %g)", row.File, row.Form, row.EncodeUS, row.DecodeUS)
		}
	}
	// The summary adds up.
	var total int64
	for _, p := range ps {
		total += int64(len(p.JSON))
	}
	all, ok := rep.summary(classAll, formJSON)
	if !ok || all.Files != len(ps) || all.JSONBytes != total || all.WireBytes != total || all.ByteRatio != 1 {
		t.Errorf("summary for all JSON: %+v", all)
	}
	var csvBuf bytes.Buffer
	if err := rep.WriteCSV(&csvBuf); err != nil {
		t.Fatal(err)
	}
	lines, err := csv.NewReader(&csvBuf).ReadAll()
	if err != nil || len(lines) != len(rep.Rows)+1 {
		t.Errorf("CSV: %d lines, %v", len(lines), err)
	}
	svg := filepath.Join(t.TempDir(), "codec.svg")
	if err := rep.PlotCodec(svg); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(svg); err != nil || !bytes.Contains(b, []byte("<svg")) {
		t.Errorf("chart: %v", err)
	}
}

// TestCodecComparisonCatchesLoss feeds the comparison a form that drops a
// byte: it must refuse to report it.
func TestCodecComparisonCatchesLoss(t *testing.T) {
	lossy := form{
		name: "lossy",
		enc:  func(dst, json []byte) ([]byte, error) { return append(dst, json[:len(json)-1]...), nil },
		dec:  func(dst, wire []byte) ([]byte, error) { return append(dst, wire...), nil },
	}
	_, err := runCodec(context.Background(), CodecConfig{Payloads: corpusPayloads(t, "req-chat-tiny-01.json")}, []form{lossy})
	if !errors.Is(err, ErrRoundTrip) {
		t.Errorf("got %v, want ErrRoundTrip", err)
	}
}

func isText(form string) bool {
	return form != formZstd && form != formM2MBinary && form != formTNCl100kBin && form != formTNO200kBinary
}

func TestSizeClass(t *testing.T) {
	for n, want := range map[int]string{0: "tiny", 399: "tiny", 400: "1k", 1535: "1k", 1536: "4k", 6143: "4k", 6144: "16k", 32767: "16k", 32768: "100k", 1 << 20: "100k"} {
		if got := sizeClass(n); got != want {
			t.Errorf("sizeClass(%d) = %s, want %s", n, got, want)
		}
	}
}
