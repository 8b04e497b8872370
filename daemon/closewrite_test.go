package daemon

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// TestCloseErrorBeforeConnectionEnds runs the real daemon over loopback
// WebSocket: an agent whose control message exceeds 65,536 bytes gets
// CLOSE ERROR before its connection ends (docs/protocol.md §1), even when
// the writer is slow to hand the CLOSE to the transport, as on a loaded
// machine. A reader that tore the session down as soon as the writer had
// picked the CLOSE up, before it was written, would leave the agent with
// status 1009 and no reason.
func TestCloseErrorBeforeConnectionEnds(t *testing.T) {
	srv := runServer(t, Config{
		QUICAddr: "-", AdminAddr: "-", WSAddr: "127.0.0.1:0",
		CertDir:          t.TempDir(),
		Logger:           zerolog.New(io.Discard),
		beforeCloseWrite: func() { time.Sleep(100 * time.Millisecond) },
	})

	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer dcancel()
	conn, err := transport.DialWS(dctx, "ws://"+srv.WSAddr().String()+DefaultWSPath, nil, transport.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hs, err := negotiate.NewHello(negotiate.ClientConfig{AgentID: "oversized-control"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer hs.Close()
	if err := conn.Send(dctx, transport.ControlChannel, hs.Message()); err != nil {
		t.Fatal(err)
	}
	msg, err := conn.Receive(dctx)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := hs.Accept(msg.Data)
	msg.Release()
	if err != nil {
		t.Fatal(err)
	}
	big := []byte("\x01" + `{"type":"PING","session_id":"` + sess.ID + `","timestamp":1,"pad":"` +
		string(bytes.Repeat([]byte{'x'}, 70000)) + `"}`)
	if err := conn.Send(dctx, transport.ControlChannel, big); err != nil {
		t.Fatal(err)
	}
	for {
		msg, err := conn.Receive(dctx)
		if err != nil {
			t.Fatalf("connection ended without CLOSE ERROR: %v", err)
		}
		cm, err := negotiate.ParseControl(msg.Data)
		msg.Release()
		if err != nil {
			t.Fatal(err)
		}
		if cm.Type == negotiate.TypeClose {
			if cm.Close == nil || cm.Close.Reason != negotiate.ReasonError {
				t.Fatalf("CLOSE %+v, want reason ERROR", cm.Close)
			}
			return
		}
	}
}
