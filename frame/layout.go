package frame

// Byte layout of an M2M v1 frame (wire reference §3). Offsets are absolute,
// counted from the first byte of the "#M2M|1|" prefix, and identical in the
// binary shape and in the decoded text shape.
const (
	// Prefix starts every M2M v1 frame, in both shapes.
	Prefix = "#M2M|1|"
	// PrefixLen is len(Prefix).
	PrefixLen = 7
	// FixedHeaderLen is the size of the fixed header that follows the prefix.
	FixedHeaderLen = 20
	// MinFrameLen is the prefix plus the fixed header: the least a frame can be.
	MinFrameLen = PrefixLen + FixedHeaderLen

	// OffHeaderLen holds header_len (u16 LE): fixed header + variable header.
	OffHeaderLen = PrefixLen + 0
	// OffSchema holds the schema byte.
	OffSchema = PrefixLen + 2
	// OffSecurity holds the security mode byte.
	OffSecurity = PrefixLen + 3
	// OffFlags holds the 32-bit flags field (u16 LE specific, reserved byte, common byte).
	OffFlags = PrefixLen + 4
	// OffReserved starts the 12 reserved bytes. The Rust reference writes
	// zeros and never reads them; m2md sessions carry an authenticated
	// sequence number there (see OffSequence, OffChannel).
	OffReserved = PrefixLen + 8
	// ReservedLen is the size of the reserved area.
	ReservedLen = 12
	// OffSequence holds the m2md per-channel sequence number (u64 LE).
	OffSequence = OffReserved
	// OffChannel holds the m2md channel id (u32 LE) the sequence belongs to.
	OffChannel = OffReserved + 8
	// OffVarHeader starts the variable (routing or response) header.
	OffVarHeader = MinFrameLen
)

// Schema identifies what the variable header describes (wire reference §3.3).
type Schema byte

const (
	SchemaRequest           Schema = 0x01
	SchemaResponse          Schema = 0x02
	SchemaStream            Schema = 0x03
	SchemaEmbeddingRequest  Schema = 0x04
	SchemaEmbeddingResponse Schema = 0x05
	SchemaError             Schema = 0x10
	SchemaCustom            Schema = 0xfe
	SchemaUnknown           Schema = 0xff
)

// Security is the frame's protection mode (wire reference §3.4).
type Security byte

const (
	SecurityNone Security = 0x00
	SecurityHMAC Security = 0x01
	SecurityAEAD Security = 0x02
)

// String returns the mode's name as used in configuration and logs.
func (s Security) String() string {
	switch s {
	case SecurityNone:
		return "none"
	case SecurityHMAC:
		return "hmac"
	case SecurityAEAD:
		return "aead"
	}
	return "unknown"
}
