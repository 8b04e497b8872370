package frame

import (
	"encoding/json"

	"github.com/m2md/m2md/internal/bufpool"
)

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// decodeText is AppendDecode for the text shape ("#M2M|1|" + Base64) with
// the protocol's strict Base64, what the Rust engine's decoder does.
func decodeText(dst, text []byte, lim Limits) ([]byte, error) {
	lim = lim.Effective()
	if len(text) > lim.MaxMessage {
		return dst, errorf(ErrLimit, "text frame of %d bytes exceeds the %d-byte message limit", len(text), lim.MaxMessage)
	}
	if len(text) < PrefixLen || string(text[:PrefixLen]) != Prefix {
		return dst, errorf(ErrBadPrefix, "text frame does not start with %q", Prefix)
	}
	enc := text[PrefixLen:]
	if err := checkNoNewline(enc); err != nil {
		return dst, err
	}
	bin := bufpool.Get(PrefixLen + b64.DecodedLen(len(enc)))
	defer bufpool.Put(bin)
	copy(*bin, Prefix)
	n, err := b64.Decode((*bin)[PrefixLen:], enc)
	if err != nil {
		return dst, errorf(ErrMalformed, "Base64: %v", err)
	}
	return AppendDecode(dst, (*bin)[:PrefixLen+n], lim)
}
