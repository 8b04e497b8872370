package frame

import "encoding/binary"

// Sequence reads the m2md sequence number and channel id from the reserved
// bytes of a binary-shape frame (docs/protocol.md §5.3).
func Sequence(frame []byte) (seq uint64, channel uint32, err error) {
	if err := checkFixedHeader(frame); err != nil {
		return 0, 0, err
	}
	return binary.LittleEndian.Uint64(frame[OffSequence:]), binary.LittleEndian.Uint32(frame[OffChannel:]), nil
}

// SetSequence writes the m2md sequence number and channel id into the
// reserved bytes of a binary-shape frame. Do it before the frame is
// protected: the bytes are covered by the HMAC tag and the AEAD's
// associated data.
func SetSequence(frame []byte, seq uint64, channel uint32) error {
	if err := checkFixedHeader(frame); err != nil {
		return err
	}
	binary.LittleEndian.PutUint64(frame[OffSequence:], seq)
	binary.LittleEndian.PutUint32(frame[OffChannel:], channel)
	return nil
}

func checkFixedHeader(frame []byte) error {
	if len(frame) < PrefixLen || string(frame[:PrefixLen]) != Prefix {
		return errorf(ErrBadPrefix, "binary frame does not start with %q", Prefix)
	}
	if len(frame) < MinFrameLen {
		return errorf(ErrTruncated, "frame of %d bytes is shorter than the %d-byte fixed header", len(frame), MinFrameLen)
	}
	return nil
}
