package daemon

import (
	"fmt"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/negotiate"
)

// dataIn is a received DATA message as readData leaves it.
type dataIn struct {
	dh negotiate.DataHeader
	// form is the frame's form; 0 when its first byte names none.
	form negotiate.FrameForm
	// fr is the frame to route: the opened M2M v1 frame or the (opened)
	// TokenNative frame. It aliases the message.
	fr     []byte
	format frameFormat
	h      frame.Header // the M2M v1 frame's header
}

// refusal is readData's verdict: the zero value routes the message; code
// refuses it with an error reply (a NOTICE for a reply); protocol means its
// DATA header is malformed, a protocol error (CLOSE ERROR).
type refusal struct {
	code     negotiate.ErrorCode
	message  string
	protocol bool
}

// readData reads the DATA message msg received on channel ch of a session
// that negotiated params and whose frames recv opens: the DATA header, the
// frame's form (docs/protocol.md §4), its verification or decryption and
// sequence (§5.3, §4.2), its header, and the frame-level rules (tokens,
// text shape, max_payload). It decides everything that is decided before
// routing and depends on nothing else, so that it can be fuzzed in-process
// (FuzzReadData). A frame that verifies has taken its sequence number in
// recv, even when it is refused afterwards. Only a refusal, and the
// rebuilding of a compact frame, allocate.
func readData(in *dataIn, msg []byte, ch uint32, recv *negotiate.Sealer, params *negotiate.Negotiated) refusal {
	dh, fr, err := negotiate.ParseData(msg)
	if err != nil {
		return refusal{protocol: true, message: "malformed DATA header"}
	}
	if dh.IsBatch() && (!dh.IsReply() || !params.Has(negotiate.FeatureBatch)) {
		// Only the daemon marks a request BATCH, and only a session with
		// the feature sends a batch (docs/protocol.md §4.4).
		return refusal{protocol: true, message: "BATCH flag on a request, or in a session without feature batch"}
	}
	if dh.IsOnce() && !params.Has(negotiate.FeatureOnce) {
		// An unknown flag bit where the feature was not negotiated
		// (docs/protocol.md §4, "Failover").
		return refusal{protocol: true, message: "ONCE flag in a session without feature once"}
	}
	if len(dh.Trace) > 0 && !params.Has(negotiate.FeatureTrace) {
		// An unknown flag bit where the feature was not negotiated
		// (docs/protocol.md §4.8).
		return refusal{protocol: true, message: "TRACE flag in a session without feature trace"}
	}
	in.dh = dh
	form, err := negotiate.ReadFrameForm(fr)
	if err != nil {
		// Taken for TokenNative, it would be routed to a receiver that
		// cannot read it. No sequence number is taken.
		return refusal{code: negotiate.CodeBadFrame, message: err.Error()}
	}
	in.form = form
	in.format = formatTokenNative
	if form == negotiate.FormM2M || form == negotiate.FormCompact {
		in.format = formatM2M
	}

	// max_payload bounds the frame as sent (docs/protocol.md §3.2 step 4);
	// it is checked after verification, so an authentic frame still
	// advances its channel's sequence and the sender's next frame is in
	// step.
	wireLen := len(fr)
	switch {
	case in.format == formatM2M:
		if form == negotiate.FormM2M && frame.IsTextShape(fr) {
			// What the Rust reference emits; its Base64 would otherwise
			// be read as the security byte and refused as bad_tag.
			return refusal{code: negotiate.CodeBadFrame, message: "text-shape M2M frame (#M2M|1| + Base64): DATA carries the binary shape; decode the Base64 first"}
		}
		// A compact frame (docs/protocol.md §4.5) comes back rebuilt, in a
		// buffer of its own: the one allocation of an accepted message.
		plain, err := recv.Open(ch, fr)
		if err != nil {
			// The refused frame took no number: name the one expected, so
			// that a sender can renumber what it sent after it.
			return refusal{code: negotiate.RefusalCode(err), message: fmt.Sprintf("frame refused in security mode %s: %v; next sequence expected on channel %d: %d",
				params.SecurityMode, err, ch, recv.Expected(ch))}
		}
		fr = plain
		if err := frame.ReadHeader(fr, &in.h); err != nil {
			return refusal{code: negotiate.CodeBadFrame, message: "frame header unreadable"}
		}
		if in.h.ExtLen > 0 {
			switch {
			case !params.Has(negotiate.FeatureDelta):
				return refusal{code: negotiate.CodeBadFrame, message: "frame carries the extension block of feature delta, which this session did not negotiate (docs/protocol.md §4.3)"}
			case dh.IsReply() != (in.h.Schema == frame.SchemaResponse):
				// ReadHeader allows a block on schemas 01 and 02 only.
				return refusal{code: negotiate.CodeBadFrame, message: "a request carries a request's extension block (schema 01), a reply only a reply delta's (schema 02) (docs/protocol.md §4.3)"}
			case dh.IsReply() && (!dh.IsEnd() || dh.IsNotice()):
				return refusal{code: negotiate.CodeBadFrame, message: "a reply delta is a final response (REPLY|END) (docs/protocol.md §4.3)"}
			}
		}
	case !recv.Protected():
		if form == negotiate.FormSealedTN {
			return refusal{code: negotiate.CodeBadFrame, message: "a sealed TokenNative envelope in a session of mode none: there TokenNative travels as it is"}
		}
	case form == negotiate.FormTokenNative || !params.Has(negotiate.FeatureTNSealed):
		// In hmac and aead sessions TokenNative travels sealed, and only
		// when tn_sealed was negotiated (docs/protocol.md §4.2).
		return refusal{code: negotiate.CodeBadTag, message: "a TokenNative frame in a session of mode " + params.SecurityMode.String() + " must be sealed (feature tn_sealed)"}
	default:
		tn, err := recv.OpenTokenNative(ch, msg[:len(msg)-len(fr)], fr)
		if err != nil {
			return refusal{code: negotiate.RefusalCode(err), message: fmt.Sprintf("sealed TokenNative refused in security mode %s: %v; next sequence expected on channel %d: %d",
				params.SecurityMode, err, ch, recv.Expected(ch))}
		}
		fr = tn
	}
	if in.format == formatTokenNative && dh.IsBatch() {
		return refusal{code: negotiate.CodeBadFrame, message: "a batch of stream chunks is an M2M v1 frame, not TokenNative (docs/protocol.md §4.4)"}
	}
	if in.format == formatTokenNative && len(fr) < 2 {
		// Only its tokenizer byte: it decodes to the empty text, which is
		// no request or reply body (docs/protocol.md §4). Refused here so
		// that no receiver takes it for an empty answer.
		return refusal{code: negotiate.CodeBadFrame, message: "TokenNative frame carries no tokens: a request or reply body is a JSON document"}
	}
	if limit := params.MaxPayload; wireLen > limit {
		return refusal{code: negotiate.CodeTooLarge, message: fmt.Sprintf("frame of %d bytes exceeds this session's max_payload %d", wireLen, limit)}
	}
	in.fr = fr
	return refusal{}
}
