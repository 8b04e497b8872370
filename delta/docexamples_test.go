package delta

import (
	"encoding/hex"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/testkit"
)

// The text of docs/protocol.md §4.3 to §4.5 around the worked examples says
// what the examples' bytes are: each frame written whole in the document is
// one this package's tests decode and write (TestProtocolExample,
// TestReplyProtocolExample, TestCompactProtocolExamples), and every size the
// text states is the size of those bytes. A third party checks its encoder
// against these numbers.
func TestProtocolDocExampleText(t *testing.T) {
	doc, err := os.ReadFile("../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	from, to := strings.Index(text, "### 4.3 "), strings.Index(text, "### 4.6 ")
	if from < 0 || to < from {
		t.Fatal("docs/protocol.md has no §4.3 to §4.6")
	}
	text = text[from:to]

	request, reply, replyFull := testkit.Unhex(t, exampleFrame), testkit.Unhex(t, exampleReplyFrame), testkit.Unhex(t, exampleReplyFrameFull)
	compactRequest, compactReply := testkit.Unhex(t, exampleCompactRequest), testkit.Unhex(t, exampleCompactReply)
	plainReply, err := frame.AppendEncode(nil, []byte(exampleReply), frame.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	header := func(fr []byte) frame.Header {
		var h frame.Header
		if err := frame.ReadHeader(fr, &h); err != nil {
			t.Fatal(err)
		}
		return h
	}
	reqH, repH, fullH := header(request), header(reply), header(replyFull)

	// Each frame written whole is one of the examples the tests decode.
	whole := regexp.MustCompile("`([0-9a-f]{60,})`").FindAllStringSubmatch(text, -1)
	var got []string
	for _, m := range whole {
		got = append(got, m[1])
	}
	want := []string{hex.EncodeToString(request), hex.EncodeToString(reply), exampleCompactRequest, exampleCompactReply}
	if !slices.Equal(got, want) {
		t.Errorf("frames written whole in §4.3-4.5:\n%q\nwant, in order:\n%q", got, want)
	}

	// The listings' payload_len, in order: frame A with a block (§4.3, its
	// 62-byte JSON uncompressed; frame's tests decode it), the delta, the
	// reply delta.
	var lens []int
	for _, m := range regexp.MustCompile(`payload_len (\d+)\n`).FindAllStringSubmatch(text, -1) {
		n, _ := strconv.Atoi(m[1])
		lens = append(lens, n)
	}
	if want := []int{len(exampleRequest), int(reqH.PayloadLen), int(repH.PayloadLen)}; !slices.Equal(lens, want) {
		t.Errorf("listings' payload_len %v, want %v", lens, want)
	}

	// Each stated size, found by the words around it (# stands for the
	// number), against the bytes it describes.
	for _, c := range []struct {
		phrase string
		want   []int
	}{
		{"`{\"model\":\"gpt-4o\",\"messages\":[{\"role\":\"user\",\n\"content\":\"Hi\"}]}` (# bytes: no compression)", []int{len(exampleRequest)}},
		{"\"content\":\"Hi\"}]}` (# bytes) and its response", []int{len(exampleRequest)}},
		{"\"finish_reason\":\"stop\"}]}` (# bytes): D is those # bytes", []int{len(exampleResponse), len(exampleRequest) + len(exampleResponse)}},
		{"\"Name three primes.\"}]}` (# bytes), travels as", []int{len(exampleDoc)}},
		{"header_len # = 20 + 9 routing + 4 block", []int{int(reqH.HeaderLen)}},
		{"The whole frame, # bytes against # of JSON", []int{len(request), len(exampleDoc)}},
		{"\"finish_reason\":\"stop\"}]}` (#\nbytes; its plain frame is # bytes)", []int{len(exampleReply), len(plainReply)}},
		{"the base response (# bytes, the example's D without\nits request) followed by the #-byte request: # bytes. It travels as (# bytes)",
			[]int{len(exampleResponse), len(exampleDoc), len(exampleResponse) + len(exampleDoc), len(reply)}},
		{"header_len # = 20 + 5 response fields + 2 block", []int{int(repH.HeaderLen)}},
		{"header_len #, as earlier m2md versions wrote it", []int{int(fullH.HeaderLen)}},
		{"The delta request of §4.3 (the #-byte frame with doc_id 2, base 1)", []int{len(request)}},
		{"in the compact form (# bytes instead of #)", []int{len(compactRequest), len(request)}},
		{"the reply delta of §4.3 (# bytes; its response fields empty, as a writer leaves them) as the compact frame\n(# bytes instead of #)",
			[]int{len(reply), len(compactReply), len(reply)}},
		{"the #-byte zstd delta", []int{int(reqH.PayloadLen)}},
		{"the #-byte zstd reply delta", []int{int(repH.PayloadLen)}},
	} {
		re := regexp.MustCompile(strings.ReplaceAll(regexp.QuoteMeta(c.phrase), "#", `(\d+)`))
		ms := re.FindAllStringSubmatch(text, -1)
		if len(ms) != 1 {
			t.Errorf("%q: found %d times in §4.3-4.5, want once", c.phrase, len(ms))
			continue
		}
		for i, s := range ms[0][1:] {
			if n, _ := strconv.Atoi(s); n != c.want[i] {
				t.Errorf("%q: number %d is %d, the bytes have %d", c.phrase, i+1, n, c.want[i])
			}
		}
	}
}
