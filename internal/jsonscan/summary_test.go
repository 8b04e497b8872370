package jsonscan

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/m2md/m2md/internal/testkit"
)

// refSummary computes a Summary from data the slow, obvious way: decode
// with encoding/json (which, like serde_json into a map, keeps the last
// duplicate key) and transcribe the Rust reference's lookups
// (src/codec/m2m/header.rs) literally. It is only meaningful for documents
// that Scan accepts.
func refSummary(t testing.TB, data []byte) Summary {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("reference decoder refused %q: %v", data, err)
	}
	get := func(v any, k string) (any, bool) {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		x, ok := m[k]
		return x, ok
	}
	str := func(v any, ok bool) (string, bool) {
		if !ok {
			return "", false
		}
		s, isStr := v.(string)
		return s, isStr
	}
	u64 := func(v any, ok bool) U64 {
		n, isNum := v.(json.Number)
		if !ok || !isNum || strings.ContainsAny(string(n), "-.eE") {
			return U64{}
		}
		x, err := strconv.ParseUint(string(n), 10, 64)
		if err != nil {
			return U64{}
		}
		return U64{Value: x, OK: true}
	}
	var sum Summary
	top, isObj := v.(map[string]any)
	if !isObj {
		return sum
	}
	sum.TopObject = true
	for name, bit := range map[string]Key{
		"model": KeyModel, "messages": KeyMessages, "choices": KeyChoices, "id": KeyID,
		"usage": KeyUsage, "tools": KeyTools, "functions": KeyFunctions,
		"tool_choice": KeyToolChoice, "function_call": KeyFunctionCall, "stream": KeyStream,
		"response_format": KeyResponseFormat, "max_tokens": KeyMaxTokens,
		"max_completion_tokens": KeyMaxCompletionTokens, "reasoning_effort": KeyReasoningEffort,
		"service_tier": KeyServiceTier, "seed": KeySeed, "logprobs": KeyLogprobs, "user": KeyUser,
		"temperature": KeyTemperature, "top_p": KeyTopP, "stop": KeyStop,
	} {
		if _, ok := top[name]; ok {
			sum.Keys |= bit
		}
	}
	if s, ok := str(get(top, "model")); ok {
		sum.Model = Str{Raw: []byte(s), Len: len(s), IsString: true}
	}
	if s, ok := str(get(top, "id")); ok {
		sum.ID = Str{Raw: []byte(s), Len: len(s), IsString: true}
	}
	stream, _ := top["stream"].(bool)
	sum.StreamTrue = stream
	sum.MaxTokens = u64(get(top, "max_tokens"))
	sum.MaxCompletionTokens = u64(get(top, "max_completion_tokens"))
	if msgs, ok := top["messages"].([]any); ok {
		sum.MsgCount = len(msgs)
		for _, m := range msgs {
			if r, ok := str(get(m, "role")); ok {
				code := map[string]int{"system": 0, "developer": 0, "user": 1, "assistant": 2, "tool": 3}
				if c, known := code[r]; known {
					if sum.RoleCount%4 == 0 {
						sum.Roles = append(sum.Roles, 0)
					}
					sum.Roles[sum.RoleCount/4] |= byte(c) << (2 * (sum.RoleCount % 4))
					sum.RoleCount++
				}
				if r == "system" || r == "developer" {
					sum.SystemRole = true
				}
			}
			content, _ := get(m, "content")
			switch c := content.(type) {
			case string:
				sum.ContentHint += uint32(len(c))
			case []any:
				for _, part := range c {
					if s, ok := str(get(part, "text")); ok {
						sum.ContentHint += uint32(len(s))
					}
					if s, ok := str(get(part, "type")); ok && s == "image_url" {
						sum.Image = true
					}
				}
			}
		}
	}
	if choices, ok := top["choices"].([]any); ok && len(choices) > 0 {
		first := choices[0]
		if s, ok := str(get(first, "finish_reason")); ok {
			sum.FinishReason = Str{Raw: []byte(s), Len: len(s), IsString: true}
		}
		if msg, ok := get(first, "message"); ok {
			_, sum.ToolCalls = get(msg, "tool_calls")
			_, sum.Refusal = str(get(msg, "refusal"))
		}
	}
	if usage, ok := top["usage"]; ok {
		sum.PromptTokens = u64(get(usage, "prompt_tokens"))
		sum.CompletionTokens = u64(get(usage, "completion_tokens"))
		if d, ok := get(usage, "prompt_tokens_details"); ok {
			sum.CachedTokens = u64(get(d, "cached_tokens"))
		}
		if d, ok := get(usage, "completion_tokens_details"); ok {
			sum.ReasoningTokens = u64(get(d, "reasoning_tokens"))
		}
	}
	return sum
}

// compareSummary reports every field where got differs from want.
func compareSummary(t testing.TB, data []byte, got, want Summary) {
	t.Helper()
	dec := func(s Str) string {
		if !s.IsString {
			return "<absent>"
		}
		return string(s.AppendDecoded(nil))
	}
	type field struct {
		name      string
		got, want any
	}
	for _, f := range []field{
		{"TopObject", got.TopObject, want.TopObject},
		{"Keys", got.Keys, want.Keys},
		{"Model", dec(got.Model), dec(want.Model)},
		{"Model.Len", got.Model.Len, want.Model.Len},
		{"ID", dec(got.ID), dec(want.ID)},
		{"StreamTrue", got.StreamTrue, want.StreamTrue},
		{"MaxTokens", got.MaxTokens, want.MaxTokens},
		{"MaxCompletionTokens", got.MaxCompletionTokens, want.MaxCompletionTokens},
		{"MsgCount", got.MsgCount, want.MsgCount},
		{"Roles", string(got.Roles), string(want.Roles)},
		{"RoleCount", got.RoleCount, want.RoleCount},
		{"SystemRole", got.SystemRole, want.SystemRole},
		{"Image", got.Image, want.Image},
		{"ContentHint", got.ContentHint, want.ContentHint},
		{"FinishReason", dec(got.FinishReason), dec(want.FinishReason)},
		{"ToolCalls", got.ToolCalls, want.ToolCalls},
		{"Refusal", got.Refusal, want.Refusal},
		{"PromptTokens", got.PromptTokens, want.PromptTokens},
		{"CompletionTokens", got.CompletionTokens, want.CompletionTokens},
		{"CachedTokens", got.CachedTokens, want.CachedTokens},
		{"ReasoningTokens", got.ReasoningTokens, want.ReasoningTokens},
	} {
		if f.got != f.want {
			t.Errorf("%.80q: %s = %v, want %v", data, f.name, f.got, f.want)
		}
	}
}

func TestSummaryMatchesReferenceOnCorpus(t *testing.T) {
	var sum Summary
	for _, doc := range testkit.Corpus(t) {
		if err := sum.Scan(doc.Data, Limits{}); err != nil {
			t.Fatalf("%s: %v", doc.Name, err)
		}
		compareSummary(t, doc.Data, sum, refSummary(t, doc.Data))
	}
}

func TestSummaryEdgeCases(t *testing.T) {
	docs := []string{
		// Duplicates: the last occurrence wins at every level.
		`{"model":"a","model":"b"}`,
		`{"model":"a","model":5}`,
		`{"messages":[{"role":"user","content":"abc"}],"messages":"x"}`,
		`{"messages":[{"role":"user","role":"system","content":"ab","content":[{"text":"xyz","text":"q"}]}]}`,
		`{"messages":[{"content":[{"type":"image_url","type":"text"}]},{"content":[{"type":"image_url"}],"content":"x"}]}`,
		`{"choices":[{"finish_reason":"stop","finish_reason":"length","message":{"refusal":"no","refusal":null}}]}`,
		`{"choices":[{"message":{"tool_calls":[]},"message":{}}]}`,
		`{"usage":{"prompt_tokens":5},"usage":null}`,
		`{"usage":{"prompt_tokens_details":{"cached_tokens":3},"prompt_tokens_details":1}}`,
		`{"max_tokens":null,"max_completion_tokens":5}`,
		`{"stream":true,"stream":false}`,
		// Escapes: keys and values compare decoded; lengths are decoded.
		`{"mod\u0065l":"gpt-\u0034o","messages":[{"r\u006fle":"\u0073ystem","content":"\u00e9\n\ud83d\ude00"}]}`,
		`{"id":"chatcmpl\u002d1","choices":[{"finish_reason":"content\u005ffilter"}]}`,
		// as_u64 semantics.
		`{"max_tokens":18446744073709551615}`,
		`{"max_tokens":18446744073709551616}`,
		`{"max_tokens":-0}`,
		`{"max_tokens":1.0}`,
		`{"max_tokens":1e3}`,
		`{"max_tokens":-5}`,
		`{"usage":{"prompt_tokens":0,"completion_tokens":4294967297}}`,
		// Shapes Rust skips.
		`{"messages":[1,"x",null,[],{"role":"function","content":"abc"},{"role":"tool"}]}`,
		`{"messages":{"role":"user"}}`,
		`{"choices":[1,{"finish_reason":"stop"}]}`,
		`{"choices":{"finish_reason":"stop"}}`,
		`{"choices":[],"usage":[]}`,
		`[{"model":"x"}]`,
		`"just a string"`,
		`{"a":{"model":"nested"},"messages":[{"content":{"text":"obj"}}]}`,
		// Many roles, packing across bytes.
		`{"messages":[{"role":"system"},{"role":"user"},{"role":"assistant"},{"role":"tool"},{"role":"developer"},{"role":"user"}]}`,
	}
	var sum Summary
	for _, doc := range docs {
		if err := sum.Scan([]byte(doc), Limits{}); err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		compareSummary(t, []byte(doc), sum, refSummary(t, []byte(doc)))
	}
}

// Example F of the wire reference §3.13: the flag inputs of one request.
func TestSummaryExampleF(t *testing.T) {
	doc := `{"model":"gpt-4o-mini","messages":[{"role":"developer","content":[{"type":"text","text":"abc"},{"type":"image_url","image_url":{"url":"x"}}]},{"role":"tool","content":"ok"}],"stream":true,"tools":[],"max_tokens":300}`
	var sum Summary
	if err := sum.Scan([]byte(doc), Limits{}); err != nil {
		t.Fatal(err)
	}
	if !sum.SystemRole || !sum.Image || !sum.StreamTrue || !sum.Keys.Has(KeyTools|KeyMaxTokens) {
		t.Errorf("flags inputs wrong: %+v", sum)
	}
	if sum.MsgCount != 2 || sum.RoleCount != 2 || !bytes.Equal(sum.Roles, []byte{0x0c}) {
		t.Errorf("roles: count %d/%d packed % x, want 2/2 0c", sum.MsgCount, sum.RoleCount, sum.Roles)
	}
	if sum.ContentHint != 5 || sum.MaxTokens != (U64{300, true}) {
		t.Errorf("content hint %d, max tokens %+v", sum.ContentHint, sum.MaxTokens)
	}
}
