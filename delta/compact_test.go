package delta

import (
	"bytes"
	"testing"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/testkit"
)

// The examples of docs/protocol.md §4.5: the delta request and the reply
// delta of §4.3's examples, numbered 1 on channel 0, in the compact form.
const (
	exampleCompactRequest = `430001000d066770742d346f00000302010301c41ef74220a53d010074012c4e616d65207468726565207072696d65732e227d5d7d04005d6bc2560d1ab1f36220ad20`
	exampleCompactReply   = `430801f5f992cb20bae50000683231322c203320616e6420352e041008628c7b1bca6a8ba40d0102`
)

func TestCompactProtocolExamples(t *testing.T) {
	for _, tc := range []struct{ frame, compact string }{
		{exampleFrame, exampleCompactRequest},
		{exampleReplyFrame, exampleCompactReply},
	} {
		fr := testkit.Unhex(t, tc.frame)
		if err := frame.SetSequence(fr, 1, 0); err != nil {
			t.Fatal(err)
		}
		want := testkit.Unhex(t, tc.compact)
		got, ok := frame.AppendCompact(nil, fr, 0)
		if !ok || !bytes.Equal(got, want) {
			t.Fatalf("compact form %x (%v), want %x", got, ok, want)
		}
		back, err := frame.AppendExpand(nil, want, 0)
		if err != nil || !bytes.Equal(back, fr) {
			t.Fatalf("rebuilt %x, %v; want %x", back, err, fr)
		}
		// On another channel it rebuilds another frame, which then fails
		// the channel check of §5.3: the channel is not on the wire.
		if other, err := frame.AppendExpand(nil, want, 4); err != nil || bytes.Equal(other, fr) {
			t.Fatalf("rebuilt on channel 4: %v", err)
		}
	}
}
