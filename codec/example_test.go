package codec_test

import (
	"fmt"
	"strings"

	"github.com/m2md/m2md/codec"
	"github.com/m2md/m2md/frame"
)

// Decode needs no hint: it tells the wire form from its prefix.
func Example() {
	c := codec.New(codec.Config{})
	doc := []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"Summarise the attached report in three bullet points."}]}`)

	for _, alg := range []codec.Algorithm{codec.M2M, codec.TokenNative, codec.Brotli} {
		wire, _, err := c.Encode(nil, doc, codec.EncodeOptions{Algorithm: alg})
		if err != nil {
			panic(err)
		}
		back, info, err := c.Decode(nil, wire, codec.DecodeOptions{})
		if err != nil {
			panic(err)
		}
		prefix, _, _ := strings.Cut(string(wire), "|")
		fmt.Println(info.Algorithm, prefix, string(back) == string(doc))
	}
	// Output:
	// m2m #M2M true
	// tokennative #TK true
	// brotli #M2M[v3.0] true
}

// Auto picks the form the Rust engine would and says why.
func ExampleEncodeOptions_auto() {
	c := codec.New(codec.Config{})
	_, info, err := c.Encode(nil, []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"Hello there, how are you today? I hope all is well."}]}`), codec.EncodeOptions{Auto: true})
	if err != nil {
		panic(err)
	}
	fmt.Println(info.Algorithm, "|", info.Reason)
	// Output:
	// m2m | LLM API payload (top-level messages, model or choices): M2M v1 frame
}

// A protected frame opens only with its key.
func ExampleDecodeOptions() {
	c := codec.New(codec.Config{})
	key := []byte("a 32-byte key shared by the ends")
	wire, _, err := c.Encode(nil, []byte(`{"model":"gpt-4o","messages":[]}`), codec.EncodeOptions{Algorithm: codec.M2M, Security: frame.SecurityAEAD, Key: key})
	if err != nil {
		panic(err)
	}
	if _, _, err := c.Decode(nil, wire, codec.DecodeOptions{}); err != nil {
		fmt.Println("without the key:", err != nil)
	}
	back, info, err := c.Decode(nil, wire, codec.DecodeOptions{Key: key})
	if err != nil {
		panic(err)
	}
	fmt.Println(info.Security == frame.SecurityAEAD, string(back))
	// Output:
	// without the key: true
	// true {"model":"gpt-4o","messages":[]}
}
