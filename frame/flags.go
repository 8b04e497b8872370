package frame

// Flags is the 32-bit flags field of the fixed header (wire reference
// §3.5): bits 0–15 depend on the schema, bits 16–23 are reserved, bits
// 24–31 are common to all schemas. On the wire it is a u32 LE.
//
// The schema-specific bits mean different things in request frames
// (schemas 01, 04) and response frames (02, 05, 10), so each accessor
// below is meaningful only for its kind of frame.
type Flags uint32

// Request-specific flags (schemas 01 and 04).
const (
	FlagHasSystemPrompt    Flags = 1 << 0  // a message role is "system" or "developer"
	FlagHasTools           Flags = 1 << 1  // "tools" or "functions" present
	FlagHasToolChoice      Flags = 1 << 2  // "tool_choice" or "function_call" present
	FlagHasImages          Flags = 1 << 3  // a content part has type "image_url"
	FlagStreamRequested    Flags = 1 << 4  // "stream" is true
	FlagHasResponseFormat  Flags = 1 << 5  // "response_format" present
	FlagHasMaxTokens       Flags = 1 << 6  // "max_tokens" or "max_completion_tokens" present
	FlagHasReasoningEffort Flags = 1 << 7  // "reasoning_effort" present
	FlagHasServiceTier     Flags = 1 << 8  // "service_tier" present
	FlagHasSeed            Flags = 1 << 9  // "seed" present
	FlagHasLogprobs        Flags = 1 << 10 // "logprobs" present
	FlagHasUserID          Flags = 1 << 11 // "user" present
	FlagHasTemperature     Flags = 1 << 12 // "temperature" present
	FlagHasTopP            Flags = 1 << 13 // "top_p" present
	FlagHasStop            Flags = 1 << 14 // "stop" present
)

// Response-specific flags (schemas 02, 05 and 10).
const (
	FlagHasToolCalls       Flags = 1 << 0 // choices[0].message.tool_calls present
	FlagHasRefusal         Flags = 1 << 1 // choices[0].message.refusal is a string
	FlagContentFiltered    Flags = 1 << 2 // choices[0].finish_reason is "content_filter"
	FlagHasUsage           Flags = 1 << 3 // "usage" present
	FlagTruncated          Flags = 1 << 4 // choices[0].finish_reason is "length"
	FlagHasCachedTokens    Flags = 1 << 5 // cached_tokens > 0; adds a header field
	FlagHasReasoningTokens Flags = 1 << 6 // reasoning_tokens > 0; adds a header field
	FlagHasCostEstimate    Flags = 1 << 7 // set with HasUsage; adds the cost field
)

// Common flags (byte 7 of the fixed header).
const (
	// FlagCompressed: the payload is a Brotli stream. Set iff the JSON is
	// at least 100 bytes long, whether or not Brotli made it smaller.
	FlagCompressed Flags = 1 << 24
	// FlagHasExtensions is defined by the Rust reference but never set
	// nor interpreted. m2md sets it on request frames that end their
	// variable header with an extension block (extension.go,
	// docs/protocol.md §4.3).
	FlagHasExtensions Flags = 1 << 25
)

// Specific returns the schema-specific bits 0–15.
func (f Flags) Specific() uint16 { return uint16(f) }

// Compressed reports FlagCompressed.
func (f Flags) Compressed() bool { return f&FlagCompressed != 0 }

// HasExtensions reports FlagHasExtensions.
func (f Flags) HasExtensions() bool { return f&FlagHasExtensions != 0 }

// HasSystemPrompt reports FlagHasSystemPrompt (request frames).
func (f Flags) HasSystemPrompt() bool { return f&FlagHasSystemPrompt != 0 }

// HasTools reports FlagHasTools (request frames).
func (f Flags) HasTools() bool { return f&FlagHasTools != 0 }

// HasToolChoice reports FlagHasToolChoice (request frames).
func (f Flags) HasToolChoice() bool { return f&FlagHasToolChoice != 0 }

// HasImages reports FlagHasImages (request frames).
func (f Flags) HasImages() bool { return f&FlagHasImages != 0 }

// StreamRequested reports FlagStreamRequested (request frames).
func (f Flags) StreamRequested() bool { return f&FlagStreamRequested != 0 }

// HasResponseFormat reports FlagHasResponseFormat (request frames).
func (f Flags) HasResponseFormat() bool { return f&FlagHasResponseFormat != 0 }

// HasMaxTokens reports FlagHasMaxTokens (request frames).
func (f Flags) HasMaxTokens() bool { return f&FlagHasMaxTokens != 0 }

// HasReasoningEffort reports FlagHasReasoningEffort (request frames).
func (f Flags) HasReasoningEffort() bool { return f&FlagHasReasoningEffort != 0 }

// HasServiceTier reports FlagHasServiceTier (request frames).
func (f Flags) HasServiceTier() bool { return f&FlagHasServiceTier != 0 }

// HasSeed reports FlagHasSeed (request frames).
func (f Flags) HasSeed() bool { return f&FlagHasSeed != 0 }

// HasLogprobs reports FlagHasLogprobs (request frames).
func (f Flags) HasLogprobs() bool { return f&FlagHasLogprobs != 0 }

// HasUserID reports FlagHasUserID (request frames).
func (f Flags) HasUserID() bool { return f&FlagHasUserID != 0 }

// HasTemperature reports FlagHasTemperature (request frames).
func (f Flags) HasTemperature() bool { return f&FlagHasTemperature != 0 }

// HasTopP reports FlagHasTopP (request frames).
func (f Flags) HasTopP() bool { return f&FlagHasTopP != 0 }

// HasStop reports FlagHasStop (request frames).
func (f Flags) HasStop() bool { return f&FlagHasStop != 0 }

// HasToolCalls reports FlagHasToolCalls (response frames).
func (f Flags) HasToolCalls() bool { return f&FlagHasToolCalls != 0 }

// HasRefusal reports FlagHasRefusal (response frames).
func (f Flags) HasRefusal() bool { return f&FlagHasRefusal != 0 }

// ContentFiltered reports FlagContentFiltered (response frames).
func (f Flags) ContentFiltered() bool { return f&FlagContentFiltered != 0 }

// HasUsage reports FlagHasUsage (response frames).
func (f Flags) HasUsage() bool { return f&FlagHasUsage != 0 }

// Truncated reports FlagTruncated (response frames).
func (f Flags) Truncated() bool { return f&FlagTruncated != 0 }

// HasCachedTokens reports FlagHasCachedTokens (response frames).
func (f Flags) HasCachedTokens() bool { return f&FlagHasCachedTokens != 0 }

// HasReasoningTokens reports FlagHasReasoningTokens (response frames).
func (f Flags) HasReasoningTokens() bool { return f&FlagHasReasoningTokens != 0 }

// HasCostEstimate reports FlagHasCostEstimate (response frames).
func (f Flags) HasCostEstimate() bool { return f&FlagHasCostEstimate != 0 }
