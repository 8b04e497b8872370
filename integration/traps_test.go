package integration

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/negotiate"
)

// Traps a client written from docs/protocol.md alone fell into; each test
// would have caught its trap.

// errorMessage is the message of a decoded error frame's body.
func errorMessage(t *testing.T, r *received) string {
	t.Helper()
	var e struct {
		Error struct{ Message string }
	}
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatalf("error body %q: %v", r.body, err)
	}
	return e.Error.Message
}

// TestSequenceAfterRefusal (protocol.md §5.3): a refused frame (bad_tag,
// replay) takes no number, and its refusal names the number expected next,
// so a client that has pipelined frames behind it can renumber and resend
// them; a frame that verified takes its number even when it is refused for
// another reason (unknown_agent here).
func TestSequenceAfterRefusal(t *testing.T) {
	d := startDaemon(t, nil)
	body := corpus(t, "req-chat-1k-01.json")
	fr := encode(t, body)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			prov := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "seqprov-" + tr, Security: frame.SecurityAEAD, Models: []string{"gpt-4o"}})
			req := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "seqreq-" + tr, Security: frame.SecurityAEAD})
			ch := req.channel()
			want := fmt.Sprintf("next sequence expected on channel %d: 1", uint32(ch))

			bad := req.protectAt(ch, fr, 1)
			bad[len(bad)/2] ^= 1
			req.mustSend(ch, 0, 1, "", bad)
			// Pipelined behind it, numbered as if the first had counted.
			req.mustSend(ch, 0, 2, "", req.protectAt(ch, fr, 2))
			if r := req.expectError(5*time.Second, 1, "bad_tag", false); !strings.Contains(errorMessage(t, r), want) {
				t.Fatalf("bad_tag message %q does not name the expected sequence (%q)", errorMessage(t, r), want)
			}
			if r := req.expectError(5*time.Second, 2, "replay", false); !strings.Contains(errorMessage(t, r), want) {
				t.Fatalf("replay message %q does not name the expected sequence (%q)", errorMessage(t, r), want)
			}
			prov.expectSilence(50 * time.Millisecond)

			// Renumbered from 1, the pipelined request goes through.
			req.mustSend(ch, 0, 2, "", req.protectAt(ch, fr, 1))
			got := prov.recvData(5 * time.Second)
			prov.reply(got.ch, got.hdr.RequestID, true, corpus(t, "resp-chat-06.json"))
			if r := req.recvData(5 * time.Second); r.hdr.RequestID != 2 || r.code != "" {
				t.Fatalf("renumbered request: id %d code %q", r.hdr.RequestID, r.code)
			}
			// A verified frame refused by routing took number 2: the next is 3.
			req.mustSend(ch, 0, 3, "nobody", req.protectAt(ch, fr, 2))
			req.expectError(5*time.Second, 3, "unknown_agent", false)
			req.mustSend(ch, 0, 4, "", req.protectAt(ch, fr, 3))
			got = prov.recvData(5 * time.Second)
			prov.reply(got.ch, got.hdr.RequestID, true, corpus(t, "resp-chat-06.json"))
			if r := req.recvData(5 * time.Second); r.hdr.RequestID != 4 || r.code != "" {
				t.Fatalf("request after unknown_agent: id %d code %q", r.hdr.RequestID, r.code)
			}
		})
	}
}

// TestDuplicateRequestIsNotice (protocol.md §4): a request reusing the id
// of one still outstanding is refused with a NOTICE (REPLY|END|NOTICE), so
// it cannot be mistaken for the final answer to the original, whose real
// answer arrives afterwards as a plain REPLY|END.
func TestDuplicateRequestIsNotice(t *testing.T) {
	d := startDaemon(t, nil)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			prov := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "dupprov-" + tr, Models: []string{"gpt-4o"}})
			req := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "dupreq-" + tr})
			fr := encode(t, corpus(t, "req-chat-1k-01.json"))
			ch1 := req.channel()
			req.mustSend(ch1, 0, 9, "", req.protect(ch1, fr))
			dl := prov.recvData(5 * time.Second)
			ch2 := req.channel()
			req.mustSend(ch2, 0, 9, "", req.protect(ch2, fr))
			r := req.expectError(5*time.Second, 9, "duplicate_request", true)
			if r.ch != ch2 {
				t.Fatalf("duplicate_request on channel %d, want %d", r.ch, ch2)
			}
			prov.expectSilence(50 * time.Millisecond)
			prov.reply(dl.ch, dl.hdr.RequestID, true, corpus(t, "resp-chat-06.json"))
			if r := req.recvData(5 * time.Second); r.hdr.RequestID != 9 || r.code != "" || r.hdr.Flags != negotiate.FlagReply|negotiate.FlagEnd {
				t.Fatalf("original's answer: id %d code %q flags %v", r.hdr.RequestID, r.code, r.hdr.Flags)
			}
		})
	}
}

// TestTextShapeFrameRefused (protocol.md §4): a text-shape M2M v1 frame
// ("#M2M|1|" + Base64, what the Rust reference emits) is refused as
// bad_frame with a message naming the text shape, in every security mode,
// not as bad_tag.
func TestTextShapeFrameRefused(t *testing.T) {
	d := startDaemon(t, nil)
	text, err := frame.AppendEncodeText(nil, corpus(t, "req-chat-1k-01.json"), frame.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range modes {
		for _, tr := range transports {
			t.Run(mode.String()+"/"+tr, func(t *testing.T) {
				req := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "text-" + mode.String() + "-" + tr, Security: mode})
				ch := req.channel()
				req.mustSend(ch, 0, 1, "", text)
				if r := req.expectError(5*time.Second, 1, "bad_frame", false); !strings.Contains(errorMessage(t, r), "text-shape") {
					t.Fatalf("message %q does not name the text shape", errorMessage(t, r))
				}
			})
		}
	}
}
