package negotiate

// Kind is a message's first byte (docs/protocol.md §2).
type Kind byte

const (
	KindControl Kind = 0x01
	KindData    Kind = 0x02
	// KindCancel is a CANCEL of a request (§4.1), only in sessions that
	// negotiated FeatureCancel.
	KindCancel Kind = 0x03
)

func (k Kind) String() string {
	switch k {
	case KindControl:
		return "CONTROL"
	case KindData:
		return "DATA"
	case KindCancel:
		return "CANCEL"
	}
	return "unknown"
}

// MessageKind returns the kind of msg, or ErrUnknownKind for an empty
// message or an unknown kind byte (a protocol error). KindCancel is
// returned whatever the session negotiated: the caller refuses it in a
// session without FeatureCancel.
func MessageKind(msg []byte) (Kind, error) {
	if len(msg) == 0 {
		return 0, ErrUnknownKind
	}
	switch k := Kind(msg[0]); k {
	case KindControl, KindData, KindCancel:
		return k, nil
	}
	return 0, ErrUnknownKind
}
