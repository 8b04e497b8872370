package jsonscan

// Key is a set of the top-level keys the M2M headers care about.
type Key uint32

// Top-level keys recorded in Summary.Keys when present (with any value,
// null included).
const (
	KeyModel Key = 1 << iota
	KeyMessages
	KeyChoices
	KeyID
	KeyUsage
	KeyTools
	KeyFunctions
	KeyToolChoice
	KeyFunctionCall
	KeyStream
	KeyResponseFormat
	KeyMaxTokens
	KeyMaxCompletionTokens
	KeyReasoningEffort
	KeyServiceTier
	KeySeed
	KeyLogprobs
	KeyUser
	KeyTemperature
	KeyTopP
	KeyStop
)

// Has reports whether all keys in k are in the set.
func (s Key) Has(k Key) bool { return s&k == k }

// HasAny reports whether some key in k is in the set.
func (s Key) HasAny(k Key) bool { return s&k != 0 }

// U64 is a number that may or may not be an unsigned integer.
type U64 struct {
	Value uint64
	// OK is true only when the value was a JSON number written as a
	// non-negative integer literal that fits in 64 bits (serde_json's
	// as_u64).
	OK bool
}

// Role is a chat message's role as packed into Summary.Roles and the
// routing header, two bits each (wire reference §3.6). The frame package
// exports it as frame.Role.
type Role uint8

const (
	RoleSystem    Role = 0 // "system" and "developer"
	RoleUser      Role = 1
	RoleAssistant Role = 2
	RoleTool      Role = 3
)

func (r Role) String() string {
	switch r {
	case RoleSystem:
		return "system"
	case RoleUser:
		return "user"
	case RoleAssistant:
		return "assistant"
	}
	return "tool"
}

// Summary holds what one scan extracted. Every path below is evaluated the
// way serde_json's Value::get would evaluate it on the parsed document:
// absent when some step is not an object (or array), last duplicate wins.
// Strings alias the scanned input. Reuse a Summary across scans to reuse
// its Roles buffer.
type Summary struct {
	// TopObject reports whether the document is an object. When it is not,
	// everything below is zero.
	TopObject bool
	// Keys is the set of well-known top-level keys present.
	Keys Key

	Model Str // top-level "model" when a string
	ID    Str // top-level "id" when a string

	// StreamTrue: top-level "stream" is the literal true.
	StreamTrue          bool
	MaxTokens           U64 // top-level "max_tokens"
	MaxCompletionTokens U64 // top-level "max_completion_tokens"

	// Chat request: top-level "messages" when an array.

	// MsgCount is the number of elements of messages.
	MsgCount int
	// Roles packs the role code of each message whose "role" is one of
	// system, developer, user, assistant, tool, two bits per role, first
	// role in the least significant bits of Roles[0]. Messages with another
	// or no role are skipped, as in the Rust encoder.
	Roles []byte
	// RoleCount is the number of roles packed in Roles.
	RoleCount int
	// SystemRole: some message's role is "system" or "developer".
	SystemRole bool
	// Image: some message's content is an array with an element whose
	// "type" is "image_url".
	Image bool
	// ContentHint sums, over messages, the decoded UTF-8 length of
	// "content" when it is a string, or of each content element's "text"
	// when content is an array. It wraps like the Rust encoder's u32.
	ContentHint uint32

	// Chat response: the first element of top-level "choices".

	// FinishReason is choices[0].finish_reason when a string.
	FinishReason Str
	// ToolCalls: choices[0].message has a "tool_calls" key (any value).
	ToolCalls bool
	// Refusal: choices[0].message.refusal is a string.
	Refusal bool

	// Response usage: top-level "usage".
	PromptTokens     U64 // usage.prompt_tokens
	CompletionTokens U64 // usage.completion_tokens
	CachedTokens     U64 // usage.prompt_tokens_details.cached_tokens
	ReasoningTokens  U64 // usage.completion_tokens_details.reasoning_tokens
}

// Scan validates data within lim and fills sum from it. On error sum holds
// partial results and must not be used.
func (sum *Summary) Scan(data []byte, lim Limits) error {
	roles := sum.Roles[:0]
	*sum = Summary{Roles: roles}
	s := scanner{data: data, lim: lim.effective(), sum: sum}
	err := s.document(ctxTop)
	sum.Keys = s.keys
	return err
}

// ctx says where in the document a container is, for extraction.
type ctx uint8

const (
	ctxNone              ctx = iota // nothing to extract below here
	ctxKeys                         // top level in TopLevelKeys mode
	ctxTop                          // top-level object
	ctxMessages                     // top-level "messages" array
	ctxMessage                      // messages[i]
	ctxContent                      // messages[i].content array
	ctxPart                         // messages[i].content[j]
	ctxChoices                      // top-level "choices" array
	ctxChoice                       // choices[0]
	ctxRespMessage                  // choices[0].message
	ctxUsage                        // top-level "usage"
	ctxPromptDetails                // usage.prompt_tokens_details
	ctxCompletionDetails            // usage.completion_tokens_details
	ctxTree                         // Parse: every value becomes a Node
)

// key identifies an object member that matters in its context.
type key uint8

const (
	keyNone key = iota
	// ctxTop
	keyModel
	keyMessages
	keyChoices
	keyID
	keyUsage
	keyStream
	keyMaxTokens
	keyMaxCompletionTokens
	keyPresence // any other well-known key: presence only
	// ctxMessage
	keyRole
	keyContent
	// ctxPart
	keyText
	keyType
	// ctxChoice
	keyFinishReason
	keyRespMessage
	// ctxRespMessage
	keyToolCalls
	keyRefusal
	// ctxUsage
	keyPromptTokens
	keyCompletionTokens
	keyPromptDetails
	keyCompletionDetails
	// details
	keyCachedTokens
	keyReasoningTokens
)

// msgState and partState collect one message / content part until its
// object ends, so that duplicates inside it resolve last-wins.
type msgState struct {
	role       int8 // -1: none
	contentLen uint32
	image      bool
}

type partState struct {
	textLen uint32
	image   bool
}

func elementCtx(c ctx, i int) ctx {
	switch c {
	case ctxMessages:
		return ctxMessage
	case ctxContent:
		return ctxPart
	case ctxChoices:
		if i == 0 {
			return ctxChoice
		}
	case ctxTree:
		return ctxTree
	}
	return ctxNone
}

// keyName returns the decoded key just scanned (s.str), or false when it
// cannot be one of the names this package looks for (they are all short).
func (s *scanner) keyName(buf *[32]byte) ([]byte, bool) {
	k := s.str
	if !k.Escaped {
		return k.Raw, true
	}
	if k.Len > len(buf) {
		return nil, false
	}
	return k.AppendDecoded(buf[:0]), true
}

// lookupKey classifies the key just scanned in context c.
func (s *scanner) lookupKey(c ctx) key {
	var buf [32]byte
	name, ok := s.keyName(&buf)
	if !ok {
		return keyNone
	}
	switch c {
	case ctxTop:
		return s.topKey(name)
	case ctxKeys:
		s.topKey(name)
		return keyNone
	case ctxMessage:
		switch string(name) {
		case "role":
			return keyRole
		case "content":
			return keyContent
		}
	case ctxPart:
		switch string(name) {
		case "text":
			return keyText
		case "type":
			return keyType
		}
	case ctxChoice:
		switch string(name) {
		case "finish_reason":
			return keyFinishReason
		case "message":
			return keyRespMessage
		}
	case ctxRespMessage:
		switch string(name) {
		case "tool_calls":
			return keyToolCalls
		case "refusal":
			return keyRefusal
		}
	case ctxUsage:
		switch string(name) {
		case "prompt_tokens":
			return keyPromptTokens
		case "completion_tokens":
			return keyCompletionTokens
		case "prompt_tokens_details":
			return keyPromptDetails
		case "completion_tokens_details":
			return keyCompletionDetails
		}
	case ctxPromptDetails:
		if string(name) == "cached_tokens" {
			return keyCachedTokens
		}
	case ctxCompletionDetails:
		if string(name) == "reasoning_tokens" {
			return keyReasoningTokens
		}
	}
	return keyNone
}

// topKey records a well-known top-level key's presence and says how to
// treat its value.
func (s *scanner) topKey(name []byte) key {
	var bit Key
	k := keyPresence
	switch string(name) {
	case "model":
		bit, k = KeyModel, keyModel
	case "messages":
		bit, k = KeyMessages, keyMessages
	case "choices":
		bit, k = KeyChoices, keyChoices
	case "id":
		bit, k = KeyID, keyID
	case "usage":
		bit, k = KeyUsage, keyUsage
	case "stream":
		bit, k = KeyStream, keyStream
	case "max_tokens":
		bit, k = KeyMaxTokens, keyMaxTokens
	case "max_completion_tokens":
		bit, k = KeyMaxCompletionTokens, keyMaxCompletionTokens
	case "tools":
		bit = KeyTools
	case "functions":
		bit = KeyFunctions
	case "tool_choice":
		bit = KeyToolChoice
	case "function_call":
		bit = KeyFunctionCall
	case "response_format":
		bit = KeyResponseFormat
	case "reasoning_effort":
		bit = KeyReasoningEffort
	case "service_tier":
		bit = KeyServiceTier
	case "seed":
		bit = KeySeed
	case "logprobs":
		bit = KeyLogprobs
	case "user":
		bit = KeyUser
	case "temperature":
		bit = KeyTemperature
	case "top_p":
		bit = KeyTopP
	case "stop":
		bit = KeyStop
	default:
		return keyNone
	}
	s.keys |= bit
	return k
}

func (s *scanner) beginObject(c ctx) {
	switch c {
	case ctxTop:
		s.sum.TopObject = true
	case ctxMessage:
		s.msg = msgState{role: -1}
	case ctxPart:
		s.part = partState{}
	}
}

func (s *scanner) endObject(c ctx) {
	switch c {
	case ctxMessage:
		sum := s.sum
		if s.msg.role >= 0 {
			i := sum.RoleCount
			if i%4 == 0 {
				sum.Roles = append(sum.Roles, 0)
			}
			sum.Roles[i/4] |= byte(s.msg.role) << (2 * (i % 4))
			sum.RoleCount++
			if s.msg.role == int8(RoleSystem) {
				sum.SystemRole = true
			}
		}
		sum.ContentHint += s.msg.contentLen
		sum.Image = sum.Image || s.msg.image
	case ctxPart:
		s.msg.contentLen += s.part.textLen
		s.msg.image = s.msg.image || s.part.image
	}
}

// beforeMember resets what a repeated key replaces and returns the context
// of the member's value.
func (s *scanner) beforeMember(k key) ctx {
	sum := s.sum
	switch k {
	case keyMessages:
		sum.MsgCount, sum.Roles, sum.RoleCount = 0, sum.Roles[:0], 0
		sum.SystemRole, sum.Image, sum.ContentHint = false, false, 0
		return ctxMessages
	case keyChoices:
		sum.FinishReason, sum.ToolCalls, sum.Refusal = Str{}, false, false
		return ctxChoices
	case keyUsage:
		sum.PromptTokens, sum.CompletionTokens = U64{}, U64{}
		sum.CachedTokens, sum.ReasoningTokens = U64{}, U64{}
		return ctxUsage
	case keyContent:
		s.msg.contentLen, s.msg.image = 0, false
		return ctxContent
	case keyRespMessage:
		sum.ToolCalls, sum.Refusal = false, false
		return ctxRespMessage
	case keyToolCalls:
		sum.ToolCalls = true
	case keyPromptDetails:
		sum.CachedTokens = U64{}
		return ctxPromptDetails
	case keyCompletionDetails:
		sum.ReasoningTokens = U64{}
		return ctxCompletionDetails
	}
	return ctxNone
}

// afterMember stores a member's value once it has been scanned.
func (s *scanner) afterMember(k key, vk Kind) {
	sum := s.sum
	str := Str{}
	if vk == KindString {
		str = s.str
	}
	num := U64{}
	if vk == KindNumber && s.u64ok {
		num = U64{Value: s.u64, OK: true}
	}
	switch k {
	case keyModel:
		sum.Model = str
	case keyID:
		sum.ID = str
	case keyMessages:
		if vk == KindArray {
			sum.MsgCount = s.arrLen
		}
	case keyStream:
		sum.StreamTrue = vk == KindTrue
	case keyMaxTokens:
		sum.MaxTokens = num
	case keyMaxCompletionTokens:
		sum.MaxCompletionTokens = num
	case keyRole:
		s.msg.role = roleCode(str)
	case keyContent:
		if vk == KindString {
			s.msg.contentLen = uint32(str.Len)
		}
	case keyText:
		s.part.textLen = uint32(str.Len) // 0 when not a string
	case keyType:
		s.part.image = str.Equal("image_url")
	case keyFinishReason:
		sum.FinishReason = str
	case keyRefusal:
		sum.Refusal = vk == KindString
	case keyPromptTokens:
		sum.PromptTokens = num
	case keyCompletionTokens:
		sum.CompletionTokens = num
	case keyCachedTokens:
		sum.CachedTokens = num
	case keyReasoningTokens:
		sum.ReasoningTokens = num
	}
}

func roleCode(s Str) int8 {
	switch {
	case s.Equal("user"):
		return int8(RoleUser)
	case s.Equal("assistant"):
		return int8(RoleAssistant)
	case s.Equal("system"), s.Equal("developer"):
		return int8(RoleSystem)
	case s.Equal("tool"):
		return int8(RoleTool)
	}
	return -1
}
