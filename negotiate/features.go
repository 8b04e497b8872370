package negotiate

import (
	"fmt"
	"slices"
)

// Feature names an optional extension of the session protocol
// (docs/protocol.md §3.6). A client lists the features it implements in
// HELLO; the daemon answers, in ACCEPT's negotiated.features, the ones it
// implements too. Either side uses an extension only when it is negotiated.
type Feature string

// Reserved feature names.
const (
	// FeatureBatch: several stream chunks in one reply (docs/protocol.md
	// §4.4).
	FeatureBatch Feature = "batch"
	// FeatureCancel: CANCEL of an outstanding request (docs/protocol.md §4.2).
	FeatureCancel Feature = "cancel"
	// FeatureCompact: frames with an extension block travel in a compact
	// form, without the M2M v1 frame's constant and derivable bytes
	// (docs/protocol.md §4.5). Sealer writes and reads it.
	FeatureCompact Feature = "compact"
	// FeatureDelta: conversation deltas, request frames that carry an
	// extension block naming their document and its base, and whose payload
	// may be a delta against that base (docs/protocol.md §4.3).
	FeatureDelta Feature = "delta"
	// FeatureOnce: the ONCE flag of a request (FlagOnce): the daemon
	// delivers it to one provider at most, and does not deliver it again
	// to another when that provider is lost before its first reply
	// (docs/protocol.md §4, "Failover").
	FeatureOnce Feature = "once"
	// FeatureSharedStream: on QUIC, a sender may keep any number of
	// requests outstanding on one data stream (docs/protocol.md §1); each
	// side then sends all its requests on one stream it opened
	// (transport.ShareDataChannel). Nothing changes on WebSocket.
	FeatureSharedStream Feature = "shared_stream"
	// FeatureTrace: a request may carry the W3C trace context of its
	// sender's span (FlagTrace and a trace block, docs/protocol.md §4.8).
	FeatureTrace Feature = "trace"
	// FeatureTNSealed: TokenNative frames in hmac and aead sessions, in a
	// sealed envelope (docs/protocol.md §4.2).
	FeatureTNSealed Feature = "tn_sealed"
)

// Bounds of a features list.
const (
	// maxFeatures bounds the names in one features list.
	maxFeatures = 32
	// maxFeatureLen bounds one feature name, in bytes.
	maxFeatureLen = 32
)

// validFeature reports whether f is 1-32 bytes of [a-z0-9_-].
func validFeature(f Feature) bool {
	if len(f) == 0 || len(f) > maxFeatureLen {
		return false
	}
	for i := 0; i < len(f); i++ {
		c := f[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Has reports whether feature f was negotiated.
func (n Negotiated) Has(f Feature) bool { return slices.Contains(n.Features, f) }

// checkFeatures validates a configured features list.
func checkFeatures(what string, fs []Feature) error {
	if len(fs) > maxFeatures {
		return fmt.Errorf("%w: %s: more than %d features", ErrConfig, what, maxFeatures)
	}
	for _, f := range fs {
		if !validFeature(f) {
			return fmt.Errorf("%w: %s: feature %q is not 1-%d bytes of [a-z0-9_-]", ErrConfig, what, f, maxFeatureLen)
		}
	}
	return nil
}

// decodeFeatures reads an optional features member: at most maxFeatures
// valid names. Duplicates are allowed here; negotiation lists each once.
func decodeFeatures(o jsonObj, name string) ([]Feature, error) {
	names, _, err := o.strings(name, false)
	if err != nil {
		return nil, err
	}
	if len(names) > maxFeatures {
		return nil, o.errorf(name, "more than %d features", maxFeatures)
	}
	for i, s := range names {
		if !validFeature(Feature(s)) {
			return nil, o.errorf(name, "element %d: feature names are 1-%d bytes of [a-z0-9_-]", i, maxFeatureLen)
		}
	}
	return convertStrings[Feature](names), nil
}

// negotiateFeatures returns the offered features the daemon supports, in
// the client's order, each once.
func negotiateFeatures(offered, supported []Feature) []Feature {
	var out []Feature
	for _, f := range offered {
		if slices.Contains(supported, f) && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

// EnabledFeatures returns implemented without the disabled features, or an
// ErrConfig error naming a disabled feature that is not implemented (a
// typo would otherwise silently disable nothing).
func EnabledFeatures(implemented, disabled []Feature) ([]Feature, error) {
	for _, f := range disabled {
		if !slices.Contains(implemented, f) {
			return nil, fmt.Errorf("%w: feature %q cannot be disabled: this build implements %q", ErrConfig, f, implemented)
		}
	}
	var out []Feature
	for _, f := range implemented {
		if !slices.Contains(disabled, f) {
			out = append(out, f)
		}
	}
	return out, nil
}
