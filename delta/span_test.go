package delta

import (
	"bytes"
	"errors"
	"testing"

	"github.com/m2md/m2md/frame"
)

// A base and a document that together span exactly MaxSpan travel as a
// delta, through the largest encoder window; one byte more is ErrTooLarge
// (and AppendEncodeFrame sends the full frame).
func TestSpanLimit(t *testing.T) {
	half := MaxSpan / 2
	d := bytes.Repeat([]byte("the base of a long conversation "), half/32+1)[:half]
	base := MakeBase(d, half/2)
	doc := bytes.Repeat([]byte("and the document that follows it "), half/33+1)[:MaxSpan-half]
	p, err := AppendEncode(nil, doc, base)
	if err != nil {
		t.Fatalf("%d + %d bytes, exactly MaxSpan: %v", base.Size(), len(doc), err)
	}
	out, err := AppendDecode(nil, p, base, frame.Limits{})
	if err != nil || !bytes.Equal(out, doc) {
		t.Fatalf("decoding the MaxSpan delta: %d bytes, %v", len(out), err)
	}
	if _, err := AppendEncode(nil, append(doc, ' '), base); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("one byte over MaxSpan: %v, want ErrTooLarge", err)
	}
}
