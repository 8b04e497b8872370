package daemon

import (
	"bytes"
	"testing"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/testkit"
	"github.com/m2md/m2md/negotiate"
)

// fuzzKey is the frame key of the fuzzed sessions: the fuzzer protects
// frames with it so that the paths behind verification are reached too.
var fuzzKey = bytes.Repeat([]byte{0x5a}, 32)

var fuzzModes = [3]frame.Security{frame.SecurityNone, frame.SecurityHMAC, frame.SecurityAEAD}

// FuzzReadData drives the daemon's DATA receive path (readData: the DATA
// header, the frame's form, verification or decryption and sequence, the
// sealed TokenNative envelope, the frame header and every refusal rule)
// with arbitrary messages, in each security mode, with and without
// tn_sealed, delta, batch, once, trace and compact (in which Seal writes a frame with a
// block in the compact form, §4.5). seal asks the fuzzer to protect the message's frame first (1:
// as an M2M v1 frame, 2: as a sealed TokenNative envelope), as a sender
// holding the session's key would. Nothing may panic, every verdict must be
// one the protocol allows, a frame is accepted only when it is routable
// (docs/protocol.md §4), and a sequence number is taken only by a frame that
// verified.
func FuzzReadData(f *testing.F) {
	req := testkit.CorpusFile(f, "req-chat-tiny-07.json")
	m2m, err := frame.AppendEncode(nil, req, frame.Limits{})
	if err != nil {
		f.Fatal(err)
	}
	hdr := func(flags negotiate.DataFlags, id uint64, peer string) []byte {
		h, err := negotiate.AppendDataHeader(nil, flags, id, peer)
		if err != nil {
			f.Fatal(err)
		}
		return h
	}
	text, err := frame.AppendEncodeText(nil, req, frame.Limits{})
	if err != nil {
		f.Fatal(err)
	}
	big := make([]byte, 3000) // over the fuzzed sessions' max_payload of 2048
	big[0] = 0x01
	for i := 1; i < len(big); i++ {
		big[i] = byte(i % 0x80)
	}
	// Request frames with the extension block of feature delta (§4.3).
	withExt, err := frame.AppendEncodeExt(nil, req, frame.Extension{DocID: 300, BaseID: 7}, frame.Limits{})
	if err != nil {
		f.Fatal(err)
	}
	asDelta, err := frame.AppendEncodeDelta(nil, req, []byte("delta"), frame.Extension{DocID: 301, BaseID: 300}, frame.Limits{})
	if err != nil {
		f.Fatal(err)
	}
	// A reply delta (schema 02 with the block 01 01).
	replyDelta, err := frame.AppendEncodeReplyDelta(nil, []byte(`{"id":"chatcmpl-9","model":"gpt-4o","choices":[{"finish_reason":"stop"}]}`), []byte("delta"), frame.Limits{})
	if err != nil {
		f.Fatal(err)
	}
	frames := [][]byte{m2m, withExt, asDelta, replyDelta, m2m[:24], big, text, {0x00, 0x81, 0x01}, {0x02, 0x05}, {0x00}, {0x99, 0x81, 0x01}, {'T', 1, 0}, []byte("#M2M|1|")}
	for _, fr := range frames {
		for mode := range byte(3) {
			for seal := range byte(3) {
				f.Add(mode, byte(1), uint32(4), seal, append(hdr(0, 1, "bob"), fr...))
				f.Add(mode, byte(4), uint32(4), seal, append(hdr(0, 1, ""), fr...))
				f.Add(mode, byte(12), uint32(4), seal, append(hdr(0, 1, ""), fr...))
			}
			f.Add(mode, byte(12), uint32(4), byte(1), append(hdr(negotiate.FlagReply|negotiate.FlagEnd, 77, ""), fr...))
			f.Add(mode, byte(0), uint32(4), byte(2), append(hdr(negotiate.FlagReply|negotiate.FlagEnd, 77, ""), fr...))
			f.Add(mode, byte(4), uint32(4), byte(1), append(hdr(negotiate.FlagReply|negotiate.FlagEnd, 77, ""), fr...))
			f.Add(mode, byte(4), uint32(4), byte(1), append(hdr(negotiate.FlagReply, 77, ""), fr...))
		}
	}
	f.Add(byte(0), byte(0), uint32(0), byte(0), []byte{0x02, 0x08, 0x01, 0x00, 0x00})
	f.Add(byte(0), byte(16), uint32(4), byte(1), append(hdr(negotiate.FlagOnce, 5, ""), m2m...))
	f.Add(byte(2), byte(0), uint32(4), byte(1), append(hdr(negotiate.FlagOnce, 5, ""), m2m...))
	f.Add(byte(2), byte(2), uint32(4), byte(1), append(hdr(negotiate.FlagReply|negotiate.FlagBatch, 77, ""), m2m...))
	// Traced requests (feature trace, §4.8), with and without the feature;
	// a sealed envelope authenticates the block.
	block, err := negotiate.AppendTrace(nil, &negotiate.Trace{TraceID: [16]byte{1, 15: 2}, SpanID: [8]byte{3}, Flags: 1, State: "a=b"})
	if err != nil {
		f.Fatal(err)
	}
	traced, err := negotiate.AppendTracedDataHeader(nil, 0, 9, "", block)
	if err != nil {
		f.Fatal(err)
	}
	for _, feats := range []byte{32, 33, 0} {
		f.Add(byte(2), feats, uint32(4), byte(1), append(bytes.Clone(traced), m2m...))
		f.Add(byte(1), feats, uint32(4), byte(2), append(bytes.Clone(traced), 0x00, 0x81, 0x01))
	}
	f.Add(byte(0), byte(2), uint32(4), byte(0), append(hdr(negotiate.FlagReply|negotiate.FlagBatch, 77, ""), 0x00, 0x81, 0x01))
	f.Fuzz(func(t *testing.T, mode, features byte, ch uint32, seal byte, msg []byte) {
		sm := fuzzModes[int(mode)%len(fuzzModes)]
		send, err := negotiate.NewSealer(sm, fuzzKey, 0)
		if err != nil {
			t.Fatal(err)
		}
		recv, err := negotiate.NewSealer(sm, fuzzKey, 0)
		if err != nil {
			t.Fatal(err)
		}
		params := negotiate.Negotiated{SecurityMode: sm, MaxPayload: 2048}
		if features&1 != 0 {
			params.Features = append(params.Features, negotiate.FeatureTNSealed)
		}
		if features&4 != 0 {
			params.Features = append(params.Features, negotiate.FeatureDelta)
		}
		if features&2 != 0 {
			params.Features = append(params.Features, negotiate.FeatureBatch)
		}
		if features&16 != 0 {
			params.Features = append(params.Features, negotiate.FeatureOnce)
		}
		if features&32 != 0 {
			params.Features = append(params.Features, negotiate.FeatureTrace)
		}
		if features&8 != 0 {
			params.Features = append(params.Features, negotiate.FeatureCompact)
			send.EnableCompact()
			recv.EnableCompact()
		}
		msg = bytes.Clone(msg)
		sealed := false
		if _, fr, err := negotiate.ParseData(msg); err == nil {
			head := msg[:len(msg)-len(fr)]
			switch seal % 3 {
			case 1:
				if p, err := send.Seal(ch, bytes.Clone(fr)); err == nil {
					msg, sealed = append(bytes.Clone(head), p...), true
				}
			case 2:
				if p, err := send.SealTokenNative(bytes.Clone(head), ch, head, fr); err == nil {
					msg, sealed = p, true
				}
			}
		}
		before := recv.Expected(ch)
		var in dataIn
		ref := readData(&in, msg, ch, recv, &params)
		after := recv.Expected(ch)

		dh, fr, perr := negotiate.ParseData(msg)
		// BATCH is the daemon's to set on a request, and a batch reply
		// needs the feature (docs/protocol.md §4.4).
		badBatch := perr == nil && dh.IsBatch() && (!dh.IsReply() || !params.Has(negotiate.FeatureBatch))
		// ONCE is an unknown bit without feature once (docs/protocol.md
		// §4, "Failover").
		badOnce := perr == nil && dh.IsOnce() && !params.Has(negotiate.FeatureOnce)
		// So is TRACE without feature trace (docs/protocol.md §4.8).
		badTrace := perr == nil && len(dh.Trace) > 0 && !params.Has(negotiate.FeatureTrace)
		if ref.protocol != (perr != nil || badBatch || badOnce || badTrace) {
			t.Fatalf("protocol error %v, ParseData %v, BATCH misused %v, ONCE misused %v, TRACE misused %v", ref.protocol, perr, badBatch, badOnce, badTrace)
		}
		if ref.protocol {
			if ref.code != "" || after != before {
				t.Fatalf("protocol error with code %q, sequence %d -> %d", ref.code, before, after)
			}
			return
		}
		if after != before && after != before+1 {
			t.Fatalf("sequence %d -> %d", before, after)
		}
		if after != before && (!recv.Protected() || !sealed) {
			t.Fatalf("sequence advanced by a frame the fuzzer did not protect (mode %s)", sm)
		}
		switch ref.code {
		case "":
		case negotiate.CodeBadTag, negotiate.CodeReplay:
			if after != before {
				t.Fatalf("%s took a sequence number", ref.code)
			}
			fallthrough
		case negotiate.CodeBadFrame, negotiate.CodeTooLarge:
			if ref.message == "" {
				t.Fatalf("%s without a message", ref.code)
			}
			return
		default:
			t.Fatalf("refused with code %q (%s)", ref.code, ref.message)
		}

		// Accepted: the frame is routable as its form says.
		if len(fr) > params.MaxPayload {
			t.Fatalf("frame of %d bytes accepted over max_payload %d", len(fr), params.MaxPayload)
		}
		if recv.Protected() && after != before+1 {
			t.Fatalf("protected frame accepted without taking its sequence number (%d -> %d)", before, after)
		}
		switch in.format {
		case formatM2M:
			if in.form != negotiate.FormM2M && (in.form != negotiate.FormCompact || !params.Has(negotiate.FeatureCompact)) ||
				!bytes.HasPrefix(in.fr, []byte(frame.Prefix)) || frame.IsTextShape(in.fr) {
				t.Fatalf("accepted as M2M v1: form %d, frame %q", in.form, in.fr[:min(len(in.fr), 16)])
			}
			var h frame.Header
			if err := frame.ReadHeader(in.fr, &h); err != nil {
				t.Fatalf("accepted M2M v1 frame's header: %v", err)
			}
			if h.ExtLen > 0 && !params.Has(negotiate.FeatureDelta) {
				t.Fatal("extension block accepted from a session without feature delta")
			}
			// A request's block on requests, a reply delta's on final
			// replies (docs/protocol.md §4.3).
			if h.ExtLen > 0 && (in.dh.IsReply() != (h.Schema == frame.SchemaResponse) ||
				in.dh.IsReply() && (!in.dh.IsEnd() || in.dh.IsNotice())) {
				t.Fatalf("extension block of schema %#02x accepted on DATA flags %#02x", byte(h.Schema), byte(in.dh.Flags))
			}
		case formatTokenNative:
			if in.dh.IsBatch() {
				t.Fatal("TokenNative batch accepted")
			}
			if len(in.fr) < 2 || !negotiate.IsTokenizerByte(in.fr[0]) {
				t.Fatalf("accepted as TokenNative: %x", in.fr[:min(len(in.fr), 16)])
			}
			if recv.Protected() != (in.form == negotiate.FormSealedTN) {
				t.Fatalf("TokenNative of form %d accepted in mode %s", in.form, sm)
			}
			if in.form == negotiate.FormSealedTN && !params.Has(negotiate.FeatureTNSealed) {
				t.Fatal("sealed TokenNative accepted without tn_sealed")
			}
		default:
			t.Fatalf("accepted with format %d", in.format)
		}
	})
}
