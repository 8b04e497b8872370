package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/negotiate"
)

// upper is a provider that answers with the request's content, upper-cased,
// streamed in chunks when the request asks for it.
func upperHandler(t testing.TB) Handler {
	return HandlerFunc(func(ctx context.Context, req *Request, w ResponseWriter) {
		if !req.Stream {
			w.Respond(append([]byte(`{"id":"chatcmpl-u","from":"`+req.From+`","model":"`+req.Model+`","body":`), append(bytes.ToUpper(req.Body), '}')...))
			return
		}
		for i := range 10 {
			if err := w.Chunk(fmt.Appendf(nil, `{"id":"chatcmpl-u","choices":[{"delta":{"content":"%d"}}]}`, i)); err != nil {
				t.Errorf("Chunk: %v", err)
				return
			}
		}
		if err := w.Respond([]byte(`{"id":"chatcmpl-u","choices":[{"finish_reason":"stop"}]}`)); err != nil {
			t.Errorf("Respond: %v", err)
		}
		if err := w.Respond([]byte(`{}`)); !errors.Is(err, ErrResponded) {
			t.Errorf("second Respond: %v", err)
		}
	})
}

func TestProvider(t *testing.T) {
	leakCheck(t)
	d := startDaemon(t)
	for _, tr := range transports {
		for _, mode := range modes {
			t.Run(tr+"/"+mode.String(), func(t *testing.T) {
				model := "upper-" + tr + "-" + mode.String()
				dial(t, d, tr, Options{AgentID: "p-" + model, Models: []string{model}, Security: mode, Handler: upperHandler(t)})
				req := dial(t, d, tr, Options{AgentID: "r-" + model, Security: mode})

				body := chatRequest(model, "hello")
				resp, err := req.Do(testCtx(t), body)
				if err != nil {
					t.Fatal(err)
				}
				want := `{"id":"chatcmpl-u","from":"r-` + model + `","model":"` + model + `","body":` + string(bytes.ToUpper(body)) + `}`
				if string(resp.Body) != want || resp.From != "p-"+model {
					t.Fatalf("got %s from %q\nwant %s", resp.Body, resp.From, want)
				}

				// Addressed by agent id, streaming.
				st, err := req.Stream(testCtx(t), []byte(`{"model":"x","stream":true,"messages":[]}`), To("p-"+model))
				if err != nil {
					t.Fatal(err)
				}
				defer st.Close()
				for i := range 10 {
					b, err := st.Recv()
					if err != nil || !bytes.Contains(b, fmt.Appendf(nil, `"content":"%d"`, i)) {
						t.Fatalf("chunk %d: %s, %v", i, b, err)
					}
				}
				if b, err := st.Recv(); err != nil || !bytes.Contains(b, []byte("stop")) {
					t.Fatalf("final: %s, %v", b, err)
				}
				if _, err := st.Recv(); err != io.EOF {
					t.Fatalf("after final: %v", err)
				}
				if st.From() != "p-"+model {
					t.Fatalf("From %q", st.From())
				}
			})
		}
	}
}

func TestProviderErrors(t *testing.T) {
	leakCheck(t)
	d := startDaemon(t)
	release := make(chan struct{})
	started := make(chan struct{}, 4)
	h := HandlerFunc(func(ctx context.Context, req *Request, w ResponseWriter) {
		switch req.Model {
		case "refuses":
			w.Error("not_today", "go away")
		case "silent":
		case "panics":
			panic("handler bug")
		case "blocks":
			started <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
			}
			w.Respond([]byte(`{"id":"chatcmpl-b","choices":[]}`))
		}
	})
	dial(t, d, "quic", Options{AgentID: "prov", Models: []string{"refuses", "silent", "panics"},
		Handler: h, Security: frame.SecurityHMAC})
	// A handler holds its slot until it returns, even after its final
	// reply: the bound is on goroutines.
	narrow := dial(t, d, "quic", Options{AgentID: "narrow", Models: []string{"blocks"},
		Handler: h, MaxConcurrentHandlers: 1, Security: frame.SecurityHMAC})
	dial(t, d, "ws", Options{AgentID: "idle", Models: []string{"unhandled"}})
	req := dial(t, d, "ws", Options{Security: frame.SecurityAEAD})

	for _, tc := range []struct {
		model string
		code  negotiate.ErrorCode
		from  string
	}{
		{"refuses", "not_today", "prov"},
		{"silent", negotiate.CodeNoResponse, "prov"},
		{"panics", negotiate.CodeHandlerPanic, "prov"},
		{"unhandled", negotiate.CodeNoHandler, "idle"},
	} {
		_, err := req.Do(testCtx(t), chatRequest(tc.model, "x"))
		var re *RemoteError
		if !errors.As(err, &re) || re.Code != tc.code || re.From != tc.from {
			t.Errorf("%s: got %v, want %s from %s", tc.model, err, tc.code, tc.from)
		}
	}

	// One handler slot: while it is taken, the next delivery is refused at
	// once instead of waiting.
	first := make(chan error, 1)
	go func() {
		_, err := req.Do(testCtx(t), chatRequest("blocks", "1"))
		first <- err
	}()
	<-started
	_, err := req.Do(testCtx(t), chatRequest("blocks", "2"))
	var re *RemoteError
	if !errors.As(err, &re) || re.Code != negotiate.CodeProviderBusy {
		t.Fatalf("second delivery: %v, want provider_busy", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if st := narrow.Stats(); st.BusyRejections != 1 || st.Deliveries != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// An undecodable request reaches the provider (the daemon never looks at
// payloads), which refuses it with bad_frame.
func TestProviderBadRequest(t *testing.T) {
	leakCheck(t)
	d := startDaemon(t)
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			prov := dial(t, d, "quic", Options{AgentID: "judge-" + mode.String(), Security: mode, Handler: upperHandler(t)})
			req := dial(t, d, "quic", Options{Security: mode})
			fr, err := frame.AppendEncode(nil, chatRequest("m", "payload that will not decode"), frame.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			fr[len(fr)-3] ^= 0x01
			st, err := req.SendFrame(testCtx(t), fr, To(prov.AgentID()))
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			_, err = st.Recv()
			var re *RemoteError
			if !errors.As(err, &re) || re.Code != negotiate.CodeBadFrame || re.From != prov.AgentID() {
				t.Fatalf("got %v, want bad_frame from the provider", err)
			}
			if prov.Stats().BadFrames != 1 {
				t.Fatalf("provider stats %+v", prov.Stats())
			}
			// A well-formed frame through SendFrame is served.
			fr, _ = frame.AppendEncode(nil, chatRequest("m", "fine"), frame.Limits{})
			st2, err := req.SendFrame(testCtx(t), fr, To(prov.AgentID()))
			if err != nil {
				t.Fatal(err)
			}
			defer st2.Close()
			if b, err := st2.Recv(); err != nil || !bytes.Contains(b, []byte("FINE")) {
				t.Fatalf("got %s, %v", b, err)
			}
		})
	}
}

// A requester that disconnects mid-stream: the daemon's NOTICE stops the
// provider's handler.
func TestNoticeStopsHandler(t *testing.T) {
	leakCheck(t)
	d := startDaemon(t)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			model := "endless-" + tr
			stopped := make(chan error, 1)
			var once sync.Once
			dial(t, d, tr, Options{Models: []string{model}, Security: frame.SecurityAEAD,
				Handler: HandlerFunc(func(ctx context.Context, req *Request, w ResponseWriter) {
					for {
						if err := w.Chunk([]byte(`{"id":"chatcmpl-e","choices":[]}`)); err != nil {
							once.Do(func() { stopped <- err })
							return
						}
						select {
						case <-ctx.Done():
						case <-time.After(2 * time.Millisecond):
						}
					}
				})})
			req, err := Dial(testCtx(t), d.url(tr), Options{PinSHA256: d.fingerprint(), Security: frame.SecurityAEAD})
			if err != nil {
				t.Fatal(err)
			}
			st, err := req.Stream(testCtx(t), chatRequest(model, "go"))
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				if _, err := st.Recv(); err != nil {
					t.Fatal(err)
				}
			}
			req.Close()
			select {
			case err := <-stopped:
				var re *RemoteError
				if !errors.Is(err, ErrDeliveryCancelled) || !errors.As(err, &re) || re.Code != negotiate.CodeRequesterGone {
					t.Fatalf("handler's write failed with %v, want the requester_gone notice", err)
				}
			case <-time.After(testTimeout):
				t.Fatal("handler still streaming after the requester left")
			}
		})
	}
}

// A provider that is also a requester: a handler that calls Do on the same
// client must not deadlock the connection's reader.
func TestHandlerCallsDo(t *testing.T) {
	leakCheck(t)
	d := startDaemon(t)
	dial(t, d, "ws", Options{AgentID: "echo", Models: []string{"echo"},
		Handler: HandlerFunc(func(ctx context.Context, req *Request, w ResponseWriter) { w.Respond(req.Body) })})
	var c *Client
	c = dial(t, d, "ws", Options{AgentID: "relay", Models: []string{"relay"}, MaxConcurrentHandlers: 1,
		Handler: HandlerFunc(func(ctx context.Context, req *Request, w ResponseWriter) {
			resp, err := c.Do(ctx, chatRequest("echo", "inner"))
			if err != nil {
				w.Error("inner_failed", err.Error())
				return
			}
			w.Respond(resp.Body)
		})})
	req := dial(t, d, "ws", Options{})
	resp, err := req.Do(testCtx(t), chatRequest("relay", "outer"))
	if err != nil || !bytes.Equal(resp.Body, chatRequest("echo", "inner")) {
		t.Fatalf("got %s, %v", resp.Body, err)
	}
}
