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
	flagHasSystemPrompt    Flags = 1 << 0  // a message role is "system" or "developer"
	flagHasTools           Flags = 1 << 1  // "tools" or "functions" present
	flagHasToolChoice      Flags = 1 << 2  // "tool_choice" or "function_call" present
	flagHasImages          Flags = 1 << 3  // a content part has type "image_url"
	flagStreamRequested    Flags = 1 << 4  // "stream" is true
	flagHasResponseFormat  Flags = 1 << 5  // "response_format" present
	flagHasMaxTokens       Flags = 1 << 6  // "max_tokens" or "max_completion_tokens" present
	flagHasReasoningEffort Flags = 1 << 7  // "reasoning_effort" present
	flagHasServiceTier     Flags = 1 << 8  // "service_tier" present
	flagHasSeed            Flags = 1 << 9  // "seed" present
	flagHasLogprobs        Flags = 1 << 10 // "logprobs" present
	flagHasUserID          Flags = 1 << 11 // "user" present
	flagHasTemperature     Flags = 1 << 12 // "temperature" present
	flagHasTopP            Flags = 1 << 13 // "top_p" present
	flagHasStop            Flags = 1 << 14 // "stop" present
)

// Response-specific flags (schemas 02, 05 and 10).
const (
	flagHasToolCalls       Flags = 1 << 0 // choices[0].message.tool_calls present
	flagHasRefusal         Flags = 1 << 1 // choices[0].message.refusal is a string
	flagContentFiltered    Flags = 1 << 2 // choices[0].finish_reason is "content_filter"
	flagHasUsage           Flags = 1 << 3 // "usage" present
	flagTruncated          Flags = 1 << 4 // choices[0].finish_reason is "length"
	flagHasCachedTokens    Flags = 1 << 5 // cached_tokens > 0; adds a header field
	flagHasReasoningTokens Flags = 1 << 6 // reasoning_tokens > 0; adds a header field
	flagHasCostEstimate    Flags = 1 << 7 // set with HasUsage; adds the cost field
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

// Compressed reports FlagCompressed.
func (f Flags) Compressed() bool { return f&FlagCompressed != 0 }

// HasExtensions reports FlagHasExtensions.
func (f Flags) HasExtensions() bool { return f&FlagHasExtensions != 0 }

// HasSystemPrompt reports that a message role is "system" or "developer" (request frames).
func (f Flags) HasSystemPrompt() bool { return f&flagHasSystemPrompt != 0 }

// HasTools reports that "tools" or "functions" is present (request frames).
func (f Flags) HasTools() bool { return f&flagHasTools != 0 }

// HasToolChoice reports that "tool_choice" or "function_call" is present (request frames).
func (f Flags) HasToolChoice() bool { return f&flagHasToolChoice != 0 }

// HasImages reports that a content part has type "image_url" (request frames).
func (f Flags) HasImages() bool { return f&flagHasImages != 0 }

// StreamRequested reports that "stream" is true (request frames).
func (f Flags) StreamRequested() bool { return f&flagStreamRequested != 0 }

// HasResponseFormat reports that "response_format" is present (request frames).
func (f Flags) HasResponseFormat() bool { return f&flagHasResponseFormat != 0 }

// HasMaxTokens reports that "max_tokens" or "max_completion_tokens" is present (request frames).
func (f Flags) HasMaxTokens() bool { return f&flagHasMaxTokens != 0 }

// HasReasoningEffort reports that "reasoning_effort" is present (request frames).
func (f Flags) HasReasoningEffort() bool { return f&flagHasReasoningEffort != 0 }

// HasServiceTier reports that "service_tier" is present (request frames).
func (f Flags) HasServiceTier() bool { return f&flagHasServiceTier != 0 }

// HasSeed reports that "seed" is present (request frames).
func (f Flags) HasSeed() bool { return f&flagHasSeed != 0 }

// HasLogprobs reports that "logprobs" is present (request frames).
func (f Flags) HasLogprobs() bool { return f&flagHasLogprobs != 0 }

// HasUserID reports that "user" is present (request frames).
func (f Flags) HasUserID() bool { return f&flagHasUserID != 0 }

// HasTemperature reports that "temperature" is present (request frames).
func (f Flags) HasTemperature() bool { return f&flagHasTemperature != 0 }

// HasTopP reports that "top_p" is present (request frames).
func (f Flags) HasTopP() bool { return f&flagHasTopP != 0 }

// HasStop reports that "stop" is present (request frames).
func (f Flags) HasStop() bool { return f&flagHasStop != 0 }

// HasToolCalls reports that choices[0].message.tool_calls is present (response frames).
func (f Flags) HasToolCalls() bool { return f&flagHasToolCalls != 0 }

// HasRefusal reports that choices[0].message.refusal is a string (response frames).
func (f Flags) HasRefusal() bool { return f&flagHasRefusal != 0 }

// ContentFiltered reports that choices[0].finish_reason is "content_filter" (response frames).
func (f Flags) ContentFiltered() bool { return f&flagContentFiltered != 0 }

// HasUsage reports that "usage" is present (response frames).
func (f Flags) HasUsage() bool { return f&flagHasUsage != 0 }

// Truncated reports that choices[0].finish_reason is "length" (response frames).
func (f Flags) Truncated() bool { return f&flagTruncated != 0 }

// HasCachedTokens reports that cached_tokens > 0 (the header then carries it) (response frames).
func (f Flags) HasCachedTokens() bool { return f&flagHasCachedTokens != 0 }

// HasReasoningTokens reports that reasoning_tokens > 0 (the header then carries it) (response frames).
func (f Flags) HasReasoningTokens() bool { return f&flagHasReasoningTokens != 0 }

// HasCostEstimate reports that the header carries a cost estimate, set with HasUsage (response frames).
func (f Flags) HasCostEstimate() bool { return f&flagHasCostEstimate != 0 }
