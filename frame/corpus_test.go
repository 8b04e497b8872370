package frame

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/m2md/m2md/internal/testkit"
)

// Every corpus document survives both shapes byte for byte, and both header
// readers see the same header, which matches an independent computation
// from the JSON.
func TestCorpusRoundTrip(t *testing.T) {
	var hb, ht Header
	for _, f := range testkit.Corpus(t) {
		if raceEnabled && len(f.Data) > 4096 {
			continue // Brotli through the race detector is slow; the logic is the same
		}
		bin, err := AppendEncode(nil, f.Data, Limits{})
		if err != nil {
			t.Fatalf("%s: encode: %v", f.Name, err)
		}
		text, err := AppendEncodeText(nil, f.Data, Limits{})
		if err != nil {
			t.Fatalf("%s: encode text: %v", f.Name, err)
		}
		if !bytes.Equal(text[PrefixLen:], []byte(b64.EncodeToString(bin[PrefixLen:]))) {
			t.Fatalf("%s: text shape is not the Base64 of the binary shape", f.Name)
		}
		checkRoundTrip(t, string(f.Data), bin, text)
		if err := ReadHeader(bin, &hb); err != nil {
			t.Fatalf("%s: ReadHeader: %v", f.Name, err)
		}
		if err := ReadTextHeader(text, &ht); err != nil {
			t.Fatalf("%s: ReadTextHeader: %v", f.Name, err)
		}
		if d := diffHeaders(hb, ht); d != "" {
			t.Fatalf("%s: binary and text headers differ: %s", f.Name, d)
		}
		if d := diffHeaders(hb, refHeader(t, f.Data, bin)); d != "" {
			t.Errorf("%s: header differs from the reference: %s", f.Name, d)
		}
		if hb.Flags.Compressed() != (len(f.Data) >= compressThreshold) {
			t.Errorf("%s: %d bytes, compressed = %v", f.Name, len(f.Data), hb.Flags.Compressed())
		}
	}
}

// The 100-byte threshold, on the corpus files that straddle it.
func TestCompressionThreshold(t *testing.T) {
	for _, tt := range []struct {
		name       string
		size       int
		compressed bool
	}{
		{"req-chat-tiny-08.json", 69, false},
		{"req-chat-tiny-09.json", 99, false},
		{"req-chat-tiny-10.json", 100, true},
	} {
		data := testkit.CorpusFile(t, tt.name)
		if len(data) != tt.size {
			t.Fatalf("%s is %d bytes, want %d", tt.name, len(data), tt.size)
		}
		bin := mustEncode(t, string(data))
		h := mustReadHeader(t, bin)
		if h.Flags.Compressed() != tt.compressed {
			t.Errorf("%s: compressed = %v", tt.name, h.Flags.Compressed())
		}
		if !tt.compressed && !bytes.Equal(bin[len(bin)-len(data):], data) {
			t.Errorf("%s: uncompressed payload is not the JSON itself", tt.name)
		}
		checkRoundTrip(t, string(data), bin, mustEncodeText(t, string(data)))
	}
}

func diffHeaders(a, b Header) string {
	var d []string
	add := func(name string, x, y any) {
		if x != y {
			d = append(d, name+": "+strconv.Quote(toString(x))+" vs "+strconv.Quote(toString(y)))
		}
	}
	add("HeaderLen", a.HeaderLen, b.HeaderLen)
	add("Schema", a.Schema, b.Schema)
	add("Security", a.Security, b.Security)
	add("Flags", a.Flags, b.Flags)
	add("Sequence", a.Sequence, b.Sequence)
	add("Channel", a.Channel, b.Channel)
	add("Model", string(a.Model), string(b.Model))
	add("MsgCount", a.MsgCount, b.MsgCount)
	add("Roles", string(a.Roles), string(b.Roles))
	add("ContentHint", a.ContentHint, b.ContentHint)
	add("MaxTokens", a.MaxTokens, b.MaxTokens)
	add("HasMaxTokens", a.HasMaxTokens, b.HasMaxTokens)
	add("RoutingMisaligned", a.RoutingMisaligned, b.RoutingMisaligned)
	add("ID", string(a.ID), string(b.ID))
	add("FinishReason", a.FinishReason, b.FinishReason)
	add("PromptTokens", a.PromptTokens, b.PromptTokens)
	add("CompletionTokens", a.CompletionTokens, b.CompletionTokens)
	add("CachedTokens", a.CachedTokens, b.CachedTokens)
	add("ReasoningTokens", a.ReasoningTokens, b.ReasoningTokens)
	add("EstCost", math.Float32bits(a.EstCost), math.Float32bits(b.EstCost))
	add("HasEstCost", a.HasEstCost, b.HasEstCost)
	add("PayloadKnown", a.PayloadKnown, b.PayloadKnown)
	add("PayloadLen", a.PayloadLen, b.PayloadLen)
	add("CRC", a.CRC, b.CRC)
	return strings.Join(d, "; ")
}

func toString(x any) string {
	switch v := x.(type) {
	case string:
		return v
	case bool:
		return strconv.FormatBool(v)
	case int:
		return strconv.Itoa(v)
	}
	return strconv.FormatUint(reflectUint(x), 10)
}

func reflectUint(x any) uint64 {
	switch v := x.(type) {
	case uint64:
		return v
	case uint32:
		return uint64(v)
	case Flags:
		return uint64(v)
	case Schema:
		return uint64(v)
	case Security:
		return uint64(v)
	case FinishReason:
		return uint64(v)
	}
	return 0
}

// refHeader computes the header the Rust encoder would write for doc, by
// decoding it with encoding/json and transcribing src/codec/m2m/header.rs,
// frame.rs and mod.rs literally. PayloadLen and CRC are taken from frame
// (the Brotli bytes are not fixed by the reference).
func refHeader(t testing.TB, doc, frame []byte) Header {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(doc))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatal(err)
	}
	get := func(v any, k string) (any, bool) {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		x, ok := m[k]
		return x, ok
	}
	str := func(v any, ok bool) string { s, _ := v.(string); return s }
	u64 := func(v any, ok bool) (uint64, bool) {
		n, isNum := v.(json.Number)
		if !ok || !isNum || strings.ContainsAny(string(n), "-.eE") {
			return 0, false
		}
		x, err := strconv.ParseUint(string(n), 10, 64)
		return x, err == nil
	}
	has := func(k string) bool { _, ok := get(v, k); return ok }

	var h Header
	h.Schema = SchemaRequest
	if !(has("messages") && has("model")) && (has("choices") || strings.HasPrefix(str(get(v, "id")), "chatcmpl-")) {
		h.Schema = SchemaResponse
	}
	h.Model = []byte(str(get(v, "model")))
	var flags Flags
	varLen := 0
	if h.Schema == SchemaRequest {
		var roles []Role
		msgs, _ := get(v, "messages")
		if list, ok := msgs.([]any); ok {
			h.MsgCount = uint32(len(list))
			for _, m := range list {
				switch str(get(m, "role")) {
				case "system", "developer":
					roles = append(roles, RoleSystem)
					flags |= flagHasSystemPrompt
				case "user":
					roles = append(roles, RoleUser)
				case "assistant":
					roles = append(roles, RoleAssistant)
				case "tool":
					roles = append(roles, RoleTool)
				}
				content, _ := get(m, "content")
				switch c := content.(type) {
				case string:
					h.ContentHint += uint32(len(c))
				case []any:
					for _, p := range c {
						h.ContentHint += uint32(len(str(get(p, "text"))))
						if str(get(p, "type")) == "image_url" {
							flags |= flagHasImages
						}
					}
				}
			}
		}
		h.Roles = make([]byte, (len(roles)*2+7)/8)
		for i, r := range roles {
			h.Roles[i/4] |= byte(r) << (2 * (i % 4))
		}
		for _, kf := range []struct {
			keys []string
			flag Flags
		}{
			{[]string{"tools", "functions"}, flagHasTools},
			{[]string{"tool_choice", "function_call"}, flagHasToolChoice},
			{[]string{"response_format"}, flagHasResponseFormat},
			{[]string{"max_tokens", "max_completion_tokens"}, flagHasMaxTokens},
			{[]string{"reasoning_effort"}, flagHasReasoningEffort},
			{[]string{"service_tier"}, flagHasServiceTier},
			{[]string{"seed"}, flagHasSeed},
			{[]string{"logprobs"}, flagHasLogprobs},
			{[]string{"user"}, flagHasUserID},
			{[]string{"temperature"}, flagHasTemperature},
			{[]string{"top_p"}, flagHasTopP},
			{[]string{"stop"}, flagHasStop},
		} {
			for _, k := range kf.keys {
				if has(k) {
					flags |= kf.flag
				}
			}
		}
		if s, _ := get(v, "stream"); s == true {
			flags |= flagStreamRequested
		}
		completion := uint32(500)
		if flags.HasMaxTokens() {
			mt, ok := get(v, "max_tokens")
			if !ok {
				mt, ok = get(v, "max_completion_tokens")
			}
			if x, isU64 := u64(mt, ok); isU64 {
				h.MaxTokens, h.HasMaxTokens = uint32(x), true
				completion = uint32(x)
				varLen += len(appendUvarint(nil, x&math.MaxUint32))
			}
		}
		h.EstCost, h.HasEstCost = estimateCost(string(h.Model), h.ContentHint/4, completion), true
		// A decoder reads ceil(2*msg_count/8) role bytes and, with the
		// flag, a max_tokens varint: when the encoder wrote fewer, the
		// routing header cannot be read back.
		h.RoutingMisaligned = (len(roles)*2+7)/8 != (int(h.MsgCount)*2+7)/8 ||
			flags.HasMaxTokens() && !h.HasMaxTokens
		varLen += 1 + len(h.Model) + len(appendUvarint(nil, uint64(h.MsgCount))) + len(h.Roles) +
			len(appendUvarint(nil, uint64(h.ContentHint))) + 4
	} else {
		h.ID = []byte(str(get(v, "id")))
		h.FinishReason = FinishUnknown
		if choices, ok := get(v, "choices"); ok {
			if list, ok := choices.([]any); ok && len(list) > 0 {
				first := list[0]
				if msg, ok := get(first, "message"); ok {
					if _, ok := get(msg, "tool_calls"); ok {
						flags |= flagHasToolCalls
					}
					if r, ok := get(msg, "refusal"); ok {
						if _, isStr := r.(string); isStr {
							flags |= flagHasRefusal
						}
					}
				}
				if fr, ok := get(first, "finish_reason"); ok {
					switch fr {
					case "stop":
						h.FinishReason = FinishStop
					case "length":
						h.FinishReason = FinishLength
						flags |= flagTruncated
					case "tool_calls":
						h.FinishReason = FinishToolCalls
					case "content_filter":
						h.FinishReason = FinishContentFilter
						flags |= flagContentFiltered
					}
				}
			}
		}
		if usage, ok := get(v, "usage"); ok {
			flags |= flagHasUsage | flagHasCostEstimate
			p, _ := u64(get(usage, "prompt_tokens"))
			c, _ := u64(get(usage, "completion_tokens"))
			h.PromptTokens, h.CompletionTokens = uint32(p), uint32(c)
			if det, ok := get(usage, "prompt_tokens_details"); ok {
				if x, ok := u64(get(det, "cached_tokens")); ok && x > 0 {
					flags |= flagHasCachedTokens
					h.CachedTokens = uint32(x)
					varLen += len(appendUvarint(nil, uint64(h.CachedTokens)))
				}
			}
			if det, ok := get(usage, "completion_tokens_details"); ok {
				if x, ok := u64(get(det, "reasoning_tokens")); ok && x > 0 {
					flags |= flagHasReasoningTokens
					h.ReasoningTokens = uint32(x)
					varLen += len(appendUvarint(nil, uint64(h.ReasoningTokens)))
				}
			}
			h.EstCost, h.HasEstCost = estimateCost(string(h.Model), h.PromptTokens, h.CompletionTokens), true
			varLen += 4
		}
		varLen += 1 + len(h.ID) + 1 + len(h.Model) + 1 +
			len(appendUvarint(nil, uint64(h.PromptTokens))) + len(appendUvarint(nil, uint64(h.CompletionTokens)))
	}
	if len(doc) >= 100 {
		flags |= FlagCompressed
	}
	h.Flags = flags
	h.HeaderLen = FixedHeaderLen + varLen
	if len(h.Roles) == 0 {
		h.Roles = nil
	}
	fh := mustReadHeader(t, frame)
	h.PayloadKnown, h.PayloadLen, h.CRC = true, fh.PayloadLen, fh.CRC
	if h.Schema == SchemaRequest && len(fh.Roles) == 0 {
		h.Roles = fh.Roles // nil vs empty
	}
	return h
}
