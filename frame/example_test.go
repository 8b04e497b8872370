package frame_test

import (
	"errors"
	"fmt"
	"strings"

	"github.com/m2md/m2md/frame"
)

// A chat request becomes a binary frame; a router reads its routing header
// without touching the payload, and the receiver gets the JSON back byte
// for byte.
func Example() {
	req := []byte(`{"model":"gpt-4o","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}],"max_tokens":50}`)

	fr, err := frame.AppendEncode(nil, req, frame.Limits{})
	if err != nil {
		panic(err)
	}

	var h frame.Header
	if err := frame.ReadHeader(fr, &h); err != nil {
		panic(err)
	}
	fmt.Println(h.Schema == frame.SchemaRequest, string(h.Model), h.MsgCount, h.MaxTokens)
	for i := range h.RoleCount() {
		r, _ := h.Role(i)
		fmt.Print(r, " ")
	}
	fmt.Println(h.Flags.HasSystemPrompt(), h.Flags.HasMaxTokens())

	json, err := frame.AppendDecode(nil, fr, frame.Limits{})
	if err != nil {
		panic(err)
	}
	fmt.Println(string(json) == string(req))
	// Output:
	// true gpt-4o 2 50
	// system user true true
	// true
}

// The text shape is the binary frame in Base64 behind the same prefix, what
// the Rust engine and its HTTP API exchange. ReadTextHeader reads it without
// decoding the payload.
func ExampleAppendEncodeText() {
	resp := []byte(`{"id":"chatcmpl-1","model":"gpt-4o","choices":[{"message":{"role":"assistant","content":"Hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":1}}`)

	text, err := frame.AppendEncodeText(nil, resp, frame.Limits{})
	if err != nil {
		panic(err)
	}
	var h frame.Header
	if err := frame.ReadTextHeader(text, &h); err != nil {
		panic(err)
	}
	fmt.Println(strings.HasPrefix(string(text), frame.Prefix))
	fmt.Println(h.Schema == frame.SchemaResponse, string(h.ID), h.FinishReason, h.PromptTokens, h.CompletionTokens)
	// Output:
	// true
	// true chatcmpl-1 stop 9 1
}

// Limits can only tighten the wire reference's defaults. Input beyond them
// is refused with an error that wraps ErrLimit, before memory is spent on it.
func ExampleLimits() {
	deep := []byte(`{"model":"m","messages":[[[[[[]]]]]]}`)

	_, err := frame.AppendEncode(nil, deep, frame.Limits{MaxDepth: 4})
	fmt.Println(errors.Is(err, frame.ErrLimit))

	_, err = frame.AppendEncode(nil, deep, frame.Limits{})
	fmt.Println(err)
	// Output:
	// true
	// <nil>
}

// The daemon answers a request it cannot serve with an Error frame, which
// decodes to an OpenAI-style error body.
func ExampleAppendErrorFrame() {
	fr, err := frame.AppendErrorFrame(nil, "no_route", "no agent serves model gpt-4o")
	if err != nil {
		panic(err)
	}
	body, err := frame.AppendDecode(nil, fr, frame.Limits{})
	if err != nil {
		panic(err)
	}
	fmt.Println(string(body))
	// Output:
	// {"error":{"message":"no agent serves model gpt-4o","type":"m2md_error","code":"no_route"}}
}
