package frame

// appendUvarint writes v as unsigned LEB128, the minimal encoding (wire
// reference §2.1). It equals binary.AppendUvarint; it is spelled out here
// so that the decoding rules below sit next to it.
func appendUvarint(dst []byte, v uint64) []byte {
	for v >= 0x80 {
		dst = append(dst, byte(v)|0x80)
		v >>= 7
	}
	return append(dst, byte(v))
}

// readUvarint decodes a header varint from b the way the Rust decoder does:
// at most 10 bytes, bits past the 64th silently dropped, non-minimal
// encodings accepted. n is 0 when b ends inside the varint and -1 when an
// 11th byte would be needed.
func readUvarint(b []byte) (v uint64, n int) {
	var shift uint
	for i, c := range b {
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return v, i + 1
		}
		shift += 7
		if shift >= 64 {
			return 0, -1
		}
	}
	return 0, 0
}
