package tokennative_test

import (
	"fmt"

	"github.com/m2md/m2md/tokennative"
)

// A message travels as the token ids of a tokenizer both ends know; the
// text form names the tokenizer after the "#TK|" prefix, so the receiver
// needs nothing else to decode it.
func Example() {
	c := tokennative.New(tokennative.Config{})
	text := []byte(`{"role":"user","content":"Hello, world"}`)

	wire, err := c.AppendText(nil, tokennative.O200k, text)
	if err != nil {
		panic(err)
	}
	fmt.Println(tokennative.IsText(wire))

	back, enc, err := c.DecodeText(nil, wire)
	if err != nil {
		panic(err)
	}
	fmt.Println(enc, string(back) == string(text))
	// Output:
	// true
	// o200k_base true
}

// A Tokenizer gives the token ids themselves.
func ExampleTokenizer() {
	tok, err := tokennative.New(tokennative.Config{}).Tokenizer(tokennative.Cl100k)
	if err != nil {
		panic(err)
	}
	ids, err := tok.Encode(nil, []byte("Hello, world"))
	if err != nil {
		panic(err)
	}
	fmt.Println(ids)
	text, err := tok.Decode(nil, ids)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(text))
	// Output:
	// [9906 11 1917]
	// Hello, world
}
