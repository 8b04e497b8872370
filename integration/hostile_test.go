package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/transport"
)

// The hostile-peer attacks, at reduced scale. Each runs beside a legitimate
// provider and requester doing round trips (bystander), asserts that the
// heap in use (daemon, bystander and attacker share this test binary) stays
// within the limit the daemon states for the attack, and that every
// bystander round trip succeeds.

// heapWatch samples the heap in use until stopped. GOGC is 10 % meanwhile,
// so in-use memory tracks live memory rather than garbage awaiting a
// collection.
type heapWatch struct {
	base    uint64
	peak    atomic.Uint64
	stop    chan struct{}
	wg      sync.WaitGroup
	restore int
}

func watchHeap() *heapWatch {
	h := &heapWatch{stop: make(chan struct{}), restore: debug.SetGCPercent(10)}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	h.base = ms.HeapInuse
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-h.stop:
				return
			case <-tick.C:
			}
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > h.peak.Load() {
				h.peak.Store(ms.HeapInuse)
			}
		}
	}()
	return h
}

// done stops sampling and returns by how much the heap grew at its peak.
func (h *heapWatch) done() int64 {
	close(h.stop)
	h.wg.Wait()
	debug.SetGCPercent(h.restore)
	return int64(h.peak.Load()) - int64(h.base)
}

// bystander is a legitimate provider and requester on transport tr doing
// a round trip every 50 ms until stopped.
type bystander struct {
	ok, failed atomic.Int64
	firstErr   atomic.Value
	stop       chan struct{}
	wg         sync.WaitGroup
}

func startBystander(t *testing.T, d *testDaemon, tr string) *bystander {
	t.Helper()
	body := corpus(t, "req-chat-tiny-07.json")
	resp := corpus(t, "resp-chat-01.json")
	prov := dialClient(t, d.url(tr), client.Options{
		AgentID: "bystander-prov-" + tr, PinSHA256: d.Fingerprint(),
		Handler: client.HandlerFunc(func(ctx context.Context, req *client.Request, w client.ResponseWriter) {
			_ = w.Respond(resp)
		}),
	})
	req := dialClient(t, d.url(tr), client.Options{AgentID: "bystander-req-" + tr, PinSHA256: d.Fingerprint()})
	b := &bystander{stop: make(chan struct{})}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-b.stop:
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			_, err := req.Do(ctx, body, client.To(prov.AgentID()))
			cancel()
			if err != nil {
				b.failed.Add(1)
				b.firstErr.CompareAndSwap(nil, err)
				continue
			}
			b.ok.Add(1)
		}
	}()
	return b
}

// check stops the bystander and fails the test if a round trip failed or
// too few were made.
func (b *bystander) check(t *testing.T, min int64) {
	t.Helper()
	close(b.stop)
	b.wg.Wait()
	if n := b.failed.Load(); n > 0 {
		t.Errorf("bystander: %d round trips failed (first: %v), %d succeeded", n, b.firstErr.Load(), b.ok.Load())
	}
	if n := b.ok.Load(); n < min {
		t.Errorf("bystander: %d round trips succeeded, want at least %d", n, min)
	}
}

// rawQUICSession dials the daemon with quic-go itself, says HELLO on the
// control stream and reads ACCEPT, so that the test can then write what no
// transport.Conn would.
func rawQUICSession(t *testing.T, d *testDaemon, agent string) (*quic.Conn, *quic.Stream) {
	t.Helper()
	qc, ctl := rawQUICControl(t, d)
	writeFramed(t, ctl, helloBytes(t, negotiate.ClientConfig{AgentID: agent}, time.Now()))
	ctl.SetReadDeadline(time.Now().Add(10 * time.Second))
	cm := readControl(t, ctl)
	if cm.Type != negotiate.TypeAccept {
		t.Fatalf("handshake: %s, want ACCEPT", cm.Type)
	}
	return qc, ctl
}

// rawQUICControl dials the daemon with quic-go itself and opens the
// control stream, so that the test decides what to write and when to read.
func rawQUICControl(t *testing.T, d *testDaemon) (*quic.Conn, *quic.Stream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tc := d.clientTLS(t)
	tc.NextProtos = []string{transport.ALPN}
	qc, err := quic.DialAddr(ctx, d.QUICAddr().String(), tc, &quic.Config{MaxIdleTimeout: 30 * time.Second, KeepAlivePeriod: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qc.CloseWithError(0, "") })
	ctl, err := qc.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	return qc, ctl
}

func writeFramed(t *testing.T, w io.Writer, msg []byte) {
	t.Helper()
	if _, err := w.Write(binary.BigEndian.AppendUint32(nil, uint32(len(msg)))); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(msg); err != nil {
		t.Fatal(err)
	}
}

// readControl reads one length-prefixed control message.
func readControl(t *testing.T, r io.Reader) *negotiate.ControlMessage {
	t.Helper()
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		t.Fatalf("reading the control stream: %v", err)
	}
	msg := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	if _, err := io.ReadFull(r, msg); err != nil {
		t.Fatalf("reading the control stream: %v", err)
	}
	cm, err := negotiate.ParseControl(msg)
	if err != nil {
		t.Fatalf("control message: %v", err)
	}
	return cm
}

// expectCloseError reads the control stream until CLOSE ERROR (answering
// nothing), within timeout.
func expectCloseError(t *testing.T, ctl *quic.Stream, timeout time.Duration) {
	t.Helper()
	ctl.SetReadDeadline(time.Now().Add(timeout))
	for {
		cm := readControl(t, ctl)
		if cm.Type == negotiate.TypeClose {
			if cm.Close == nil || cm.Close.Reason != negotiate.ReasonError {
				t.Fatalf("CLOSE %+v, want reason ERROR", cm.Close)
			}
			return
		}
	}
}

// TestQUICStreamFloodHeldToBudget: one QUIC session opens many streams,
// announces a maximum-size message on each and sends most of every body,
// then stalls. The daemon reads one budget's worth, not every body (up to
// 4 GiB), QUIC flow control holds the rest at the attacker, the stalled messages close the session with
// CLOSE ERROR after MessageTimeout, and a bystander's round trips go on.
func TestQUICStreamFloodHeldToBudget(t *testing.T) {
	const (
		maxPayload = 1 << 20
		streams    = 60
		timeout    = 2 * time.Second
	)
	d := startDaemon(t, func(c *daemon.Config) {
		c.MaxPayload = maxPayload
		c.MessageTimeout = timeout
	})
	by := startBystander(t, d, "quic")
	heap := watchHeap()
	qc, ctl := rawQUICSession(t, d, "flooder")
	body := make([]byte, maxPayload-64<<10)
	var writers sync.WaitGroup
	for range streams {
		s, err := qc.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		writers.Add(1)
		go func() {
			defer writers.Done()
			// A DATA message's worth announced; most of it sent, never the end.
			s.Write(binary.BigEndian.AppendUint32(nil, maxPayload+512))
			s.Write(body)
		}()
	}
	start := time.Now()
	expectCloseError(t, ctl, timeout+5*time.Second)
	closedAfter := time.Since(start)
	grew := heap.done()
	qc.CloseWithError(0, "")
	writers.Wait()
	by.check(t, 10)

	// Budget: MaxPayload + 512 + 1 MiB read by the daemon, as much again in
	// quic-go's buffers (the connection window), and slack for the
	// bystander, the attacker's own buffers and what the collector has not
	// caught up with. Sent at the daemon: streams × ~1 MiB = 57 MiB.
	budget := int64(maxPayload + 512 + 1<<20)
	bound := 2*budget + 12<<20
	t.Logf("%d streams × %d KiB sent; heap grew by %.1f MiB (bound %.1f MiB); CLOSE ERROR after %v",
		streams, len(body)>>10, float64(grew)/(1<<20), float64(bound)/(1<<20), closedAfter.Round(time.Millisecond))
	if grew > bound && !raceEnabled {
		t.Errorf("heap grew by %d MiB, bound %d MiB", grew>>20, bound>>20)
	}
	if closedAfter > timeout+3*time.Second {
		t.Errorf("CLOSE ERROR after %v, MessageTimeout %v", closedAfter, timeout)
	}
	if n := metric(t, d, "m2md_frames_refused_total", "reason=message_timeout"); n < 1 {
		t.Errorf("m2md_frames_refused_total{reason=message_timeout} = %v", n)
	}
}

// TestOversizedMessagesClosedWithError: after ACCEPT, a length prefix above
// the read limit on a data stream or the control stream, and a control
// message above 65,536 bytes, each close the session with CLOSE ERROR,
// counted as too_large; before HELLO, an oversized prefix is answered with
// REJECT (docs/protocol.md §1, §2).
func TestOversizedMessagesClosedWithError(t *testing.T) {
	d := startDaemon(t, func(c *daemon.Config) { c.MaxPayload = 1 << 20 })
	for _, tc := range []struct {
		name   string
		prefix uint32
		data   bool
	}{
		{"data stream 0xFFFFFFFF", 0xFFFFFFFF, true},
		{"data stream max_payload+513", 1<<20 + 513, true},
		{"control stream 0xFFFFFFFF", 0xFFFFFFFF, false},
		{"control stream 65,537", 65537, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := metric(t, d, "m2md_frames_refused_total", "reason=too_large")
			qc, ctl := rawQUICSession(t, d, "oversize")
			w := ctl
			if tc.data {
				var err error
				if w, err = qc.OpenStream(); err != nil {
					t.Fatal(err)
				}
			}
			w.Write(binary.BigEndian.AppendUint32(nil, tc.prefix))
			expectCloseError(t, ctl, 5*time.Second)
			if n := metric(t, d, "m2md_frames_refused_total", "reason=too_large"); n != before+1 {
				t.Errorf("too_large counted %v times, want 1", n-before)
			}
		})
	}
	t.Run("before HELLO", func(t *testing.T) {
		_, ctl := rawQUICControl(t, d)
		ctl.Write(binary.BigEndian.AppendUint32(nil, 0xFFFFFFFF))
		ctl.SetReadDeadline(time.Now().Add(5 * time.Second))
		if cm := readControl(t, ctl); cm.Type != negotiate.TypeReject {
			t.Fatalf("%s, want REJECT", cm.Type)
		}
		if n := metric(t, d, "m2md_handshake_failures_total", "transport=quic", "reason=too_large"); n != 1 {
			t.Errorf("handshake failures too_large = %v, want 1", n)
		}
	})
}

// TestVanishedQUICProviderNoticed: a QUIC provider disappears without a
// word (its UDP socket closed, as when the process is killed) while
// requests are in flight. Within the daemon's QUIC idle timeout (set short
// here, as --quic-idle-timeout can; the default is 30 s) and a little, the
// requester gets agent_gone for each, and the dead session leaves
// m2md_sessions (before the idle timeout was set: 39.9 s).
func TestVanishedQUICProviderNoticed(t *testing.T) {
	t.Parallel()
	const (
		inFlight = 5
		idle     = 5 * time.Second
	)
	d := startDaemon(t, func(c *daemon.Config) { c.QUICIdleTimeout = idle })
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	qt := &quic.Transport{Conn: udp}
	defer qt.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tc := d.clientTLS(t)
	tc.NextProtos = []string{transport.ALPN}
	// The provider's own idle timeout is long: the daemon's must decide.
	qc, err := qt.Dial(ctx, d.QUICAddr(), tc, &quic.Config{MaxIdleTimeout: time.Minute, KeepAlivePeriod: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctl, _ := qc.OpenStream()
	writeFramed(t, ctl, helloBytes(t, negotiate.ClientConfig{AgentID: "doomed"}, time.Now()))
	ctl.SetReadDeadline(time.Now().Add(10 * time.Second))
	if cm := readControl(t, ctl); cm.Type != negotiate.TypeAccept {
		t.Fatalf("handshake: %s", cm.Type)
	}
	// Over WebSocket: a QUIC requester would share the short idle timeout,
	// which a loaded machine can exceed.
	req := dialClient(t, d.url("ws"), client.Options{AgentID: "waiting", PinSHA256: d.Fingerprint()})
	errs := make(chan error, inFlight)
	for range inFlight {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := req.Do(ctx, corpus(t, "req-chat-tiny-07.json"), client.To("doomed"))
			errs <- err
		}()
	}
	for range inFlight {
		if _, err := qc.AcceptStream(ctx); err != nil {
			t.Fatalf("deliveries did not arrive: %v", err)
		}
	}
	killed := time.Now()
	udp.Close() // no CONNECTION_CLOSE can leave
	for range inFlight {
		err := <-errs
		if remoteCode(err) != negotiate.CodeAgentGone {
			t.Fatalf("in-flight request ended with %v, want agent_gone", err)
		}
	}
	noticed := time.Since(killed)
	t.Logf("agent_gone %v after the provider vanished (QUIC idle timeout %v)", noticed.Round(time.Millisecond), idle)
	if noticed > idle+2*time.Second { // slack for a loaded machine
		t.Errorf("vanished provider noticed after %v, want within %v", noticed, idle)
	}
	waitSessionCount(t, d, 1, 2*time.Second)
}

// rawWS is a WebSocket client written by hand, to send frame headers no
// library would.
type rawWS struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
}

func dialRawWS(t *testing.T, d *testDaemon) *rawWS {
	t.Helper()
	nc, err := net.DialTimeout("tcp", d.WSAddr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	req := "GET " + daemon.DefaultWSPath + " HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: m2m.v1\r\n\r\n"
	if _, err := nc.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	return &rawWS{t: t, nc: nc, br: br}
}

// header writes a masked frame header (mask key zero: the payload goes as is).
func (w *rawWS) header(fin bool, opcode byte, n uint64) {
	b0 := opcode
	if fin {
		b0 |= 0x80
	}
	h := []byte{b0, 0x80}
	switch {
	case n < 126:
		h[1] |= byte(n)
	case n <= 0xFFFF:
		h[1] |= 126
		h = binary.BigEndian.AppendUint16(h, uint16(n))
	default:
		h[1] |= 127
		h = binary.BigEndian.AppendUint64(h, n)
	}
	if _, err := w.nc.Write(append(h, 0, 0, 0, 0)); err != nil {
		w.t.Fatal(err)
	}
}

func (w *rawWS) message(b []byte) {
	w.header(true, 2, uint64(len(b)))
	if _, err := w.nc.Write(b); err != nil {
		w.t.Fatal(err)
	}
}

// next reads one frame from the daemon: its opcode and payload.
func (w *rawWS) next() (byte, []byte) {
	w.t.Helper()
	var h [2]byte
	if _, err := io.ReadFull(w.br, h[:]); err != nil {
		w.t.Fatalf("reading a frame: %v", err)
	}
	n := uint64(h[1] & 0x7F)
	switch n {
	case 126:
		var e [2]byte
		io.ReadFull(w.br, e[:])
		n = uint64(binary.BigEndian.Uint16(e[:]))
	case 127:
		var e [8]byte
		io.ReadFull(w.br, e[:])
		n = binary.BigEndian.Uint64(e[:])
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(w.br, p); err != nil {
		w.t.Fatalf("reading a frame: %v", err)
	}
	return h[0] & 0x0F, p
}

func (w *rawWS) handshake(agent string) {
	w.t.Helper()
	w.message(helloBytes(w.t, negotiate.ClientConfig{AgentID: agent}, time.Now()))
	if _, p := w.next(); !bytes.Contains(p, []byte(`"ACCEPT"`)) {
		w.t.Fatalf("handshake: %q", p)
	}
}

// expectCloseError reads CLOSE ERROR (a session message) and then a
// WebSocket close with one of the status codes.
func (w *rawWS) expectCloseError(codes ...uint16) {
	w.t.Helper()
	sawClose := false
	for {
		op, p := w.next()
		switch op {
		case 2:
			cm, err := negotiate.ParseControl(p)
			if err == nil && cm.Type == negotiate.TypeClose && cm.Close != nil && cm.Close.Reason == negotiate.ReasonError {
				sawClose = true
			}
		case 8:
			if !sawClose {
				w.t.Fatal("WebSocket closed without CLOSE ERROR first")
			}
			if len(p) < 2 || !slices.Contains(codes, binary.BigEndian.Uint16(p)) {
				w.t.Fatalf("WebSocket close %x, want status %v", p, codes)
			}
			return
		}
	}
}

// TestWSOversizedRefusedFromFrameHeader: WebSocket messages announced above
// max_payload + 512, whole (up to the absurd 2^63-1) or as fragments whose
// running total passes it, are refused from their frame headers with
// CLOSE ERROR and status 1009, counted as too_large, before the body is
// buffered: 20 sessions announcing 16 MiB + 1 KiB each and sending 1 MiB of
// it move the heap by far less than the 20 MiB sent. A bystander's round
// trips go on.
func TestWSOversizedRefusedFromFrameHeader(t *testing.T) {
	const maxPayload = 4 << 20
	d := startDaemon(t, func(c *daemon.Config) { c.MaxPayload = maxPayload })
	by := startBystander(t, d, "ws")

	t.Run("2^63-1", func(t *testing.T) {
		w := dialRawWS(t, d)
		w.handshake("absurd")
		w.header(true, 2, 1<<63-1)
		w.expectCloseError(1009)
	})
	t.Run("fragments", func(t *testing.T) {
		w := dialRawWS(t, d)
		w.handshake("fragments")
		chunk := make([]byte, maxPayload/2)
		for _, op := range []byte{2, 0} {
			w.header(false, op, uint64(len(chunk)))
			w.nc.Write(chunk)
		}
		w.header(false, 0, 1024) // the running total passes max_payload + 512
		w.expectCloseError(1009)
	})
	t.Run("parallel", func(t *testing.T) {
		const sessions = 20
		heap := watchHeap()
		var wg sync.WaitGroup
		body := make([]byte, 1<<20)
		for i := range sessions {
			w := dialRawWS(t, d)
			w.handshake(fmt.Sprintf("big-%d", i))
			wg.Go(func() {
				w.header(true, 2, 16<<20+1<<10)
				w.nc.Write(body) // may fail: the daemon may have closed already
			})
			defer w.expectCloseError(1009)
		}
		wg.Wait()
		grew := heap.done()
		t.Logf("%d sessions × 1 MiB of a 16 MiB message: heap grew by %.1f MiB", sessions, float64(grew)/(1<<20))
		if grew > 8<<20 && !raceEnabled {
			t.Errorf("heap grew by %d MiB; the bodies should not have been buffered", grew>>20)
		}
	})
	time.Sleep(200 * time.Millisecond)
	by.check(t, 3)
	if n := metric(t, d, "m2md_frames_refused_total", "reason=too_large"); n < 22 {
		t.Errorf("too_large counted %v times, want 22", n)
	}
}

// TestHandshakeCapsAtAccept: raw TCP connections that never upgrade are
// capped per source address and in total at accept, before net/http reads
// them; the excess is closed at once and counted; those held are closed
// at the upgrade deadline (the HELLO timeout). Meanwhile /metrics answers
// and an established session keeps its round trips.
func TestHandshakeCapsAtAccept(t *testing.T) {
	const (
		total, perIP = 30, 20
		hello        = 2 * time.Second
	)
	d := startDaemon(t, func(c *daemon.Config) {
		c.MaxHandshakes, c.MaxHandshakesPerIP = total, perIP
		c.HelloTimeout = hello
	})
	by := startBystander(t, d, "ws")
	// openFrom opens n raw connections from a loopback source address and
	// reports how many the daemon closed at once.
	var held []net.Conn
	openFrom := func(src string, n int) (closed int) {
		dialer := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
		var opened []net.Conn
		for range n {
			c, err := dialer.Dial("tcp", d.WSAddr().String())
			if errors.Is(err, syscall.ECONNRESET) {
				closed++ // the daemon's reset overtook the dial
				continue
			}
			if err != nil {
				t.Fatalf("dial from %s: %v", src, err)
			}
			t.Cleanup(func() { c.Close() })
			opened = append(opened, c)
		}
		// Those refused have been closed by now; those held are still
		// open (the upgrade deadline is seconds away).
		time.Sleep(300 * time.Millisecond)
		for _, c := range opened {
			c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
			var b [1]byte
			if _, err := c.Read(b[:]); err != nil && !isTimeout(err) {
				closed++
				continue
			}
			held = append(held, c)
		}
		return closed
	}
	if closed := openFrom("127.0.0.2", 25); closed != 25-perIP {
		t.Errorf("from one address: %d of 25 closed at accept, want %d", closed, 25-perIP)
	}
	if closed := openFrom("127.0.0.3", 25); closed != 25-(total-perIP) {
		t.Errorf("from a second address: %d of 25 closed at accept, want %d", closed, 25-(total-perIP))
	}
	if n := metric(t, d, "m2md_limited_total", "limit=handshakes_per_ip"); n != 5 {
		t.Errorf("limited handshakes_per_ip = %v, want 5", n)
	}
	if n := metric(t, d, "m2md_limited_total", "limit=handshakes"); n != 15 {
		t.Errorf("limited handshakes = %v, want 15", n)
	}
	// The held connections end at the upgrade deadline, and a new agent
	// can connect.
	start := time.Now()
	for _, c := range held {
		c.SetReadDeadline(time.Now().Add(hello + 3*time.Second))
		var b [512]byte
		for {
			if _, err := c.Read(b[:]); err != nil {
				break
			}
		}
	}
	if d := time.Since(start); d > hello+3*time.Second {
		t.Errorf("held connections lasted %v past the attack, upgrade deadline %v", d, hello)
	}
	late := dialClient(t, d.url("ws"), client.Options{AgentID: "late", PinSHA256: d.Fingerprint()})
	late.Close()
	by.check(t, 20)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestRateLimitedErrorsRateLimited: a session far over its message rate is
// not sent one error per message: it gets at most 10 rate_limited errors a
// second, and a sender that keeps flooding after them is closed with CLOSE
// ERROR naming the flag, so that no request of it is left without an END.
func TestRateLimitedErrorsRateLimited(t *testing.T) {
	const (
		perMinute = 60
		sent      = 300
	)
	d := startDaemon(t, func(c *daemon.Config) { c.MessagesPerMinute = perMinute })
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			a := mustDialRaw(t, d, tr, negotiate.ClientConfig{AgentID: "flooder-" + tr})
			body := corpus(t, "req-chat-tiny-07.json")
			start := time.Now()
			for range sent {
				a.request("nobody", body)
			}
			codes := map[negotiate.ErrorCode]int{}
			// On QUIC, CLOSE travels on the control stream and may overtake
			// the errors on the data streams: read until the connection ends.
			var closed *negotiate.ControlMessage
			wait := 5 * time.Second
			for {
				r, cm, err := a.recv(wait)
				if errors.Is(err, errControl) {
					if cm.Type == negotiate.TypeClose {
						closed, wait = cm, time.Second
					}
					continue
				}
				if err != nil {
					if closed == nil {
						t.Fatalf("after replies %v: %v (want CLOSE ERROR)", codes, err)
					}
					break
				}
				codes[negotiate.ErrorCode(r.code)]++
			}
			elapsed := time.Since(start)
			t.Logf("%d requests in %v: replies %v, then CLOSE %s %q", sent, elapsed.Round(time.Millisecond), codes, closed.Close.Reason, closed.Close.Message)
			// The message allowance is a minute's worth (60) at once, and
			// one more a second.
			passed := codes[negotiate.CodeUnknownAgent]
			if passed < perMinute || passed > perMinute+int(elapsed.Seconds())+1 {
				t.Errorf("%d requests within the rate answered, want %d and one a second", passed, perMinute)
			}
			if max := 10 + int(elapsed.Seconds()*10) + 1; codes[negotiate.CodeRateLimited] > max || codes[negotiate.CodeRateLimited] == 0 {
				t.Errorf("%d rate_limited errors in %v, want 1..%d", codes[negotiate.CodeRateLimited], elapsed, max)
			}
			if closed.Close.Reason != negotiate.ReasonError || !strings.Contains(closed.Close.Message, "--messages-per-minute") {
				t.Errorf("CLOSE %s %q, want ERROR naming --messages-per-minute", closed.Close.Reason, closed.Close.Message)
			}
		})
	}
}

// TestSlowlorisAfterHello: sessions that start a DATA message and send
// it a byte at a time are closed with CLOSE ERROR once MessageTimeout has
// passed since its first byte, although bytes keep coming; a bystander's
// round trips go on. (Before: partial bytes kept them open until the
// keepalive, ~90 s.)
func TestSlowlorisAfterHello(t *testing.T) {
	const (
		sessions = 10
		timeout  = 1500 * time.Millisecond
	)
	d := startDaemon(t, func(c *daemon.Config) { c.MessageTimeout = timeout })
	by := startBystander(t, d, "quic")
	before := metric(t, d, "m2md_frames_refused_total", "reason=message_timeout")
	var wg sync.WaitGroup
	start := time.Now()
	closedAfter := make(chan time.Duration, 2*sessions)
	for i := range sessions {
		// WebSocket: a frame header announcing 1 KiB, then a byte every 100 ms.
		w := dialRawWS(t, d)
		w.handshake(fmt.Sprintf("slow-ws-%d", i))
		// QUIC: a length prefix announcing 1 KiB on a data stream, the same.
		qc, ctl := rawQUICSession(t, d, fmt.Sprintf("slow-quic-%d", i))
		s, err := qc.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		wg.Go(func() {
			w.header(true, 2, 1024)
			s.Write(binary.BigEndian.AppendUint32(nil, 1024))
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					w.nc.Write([]byte{0x02})
					s.Write([]byte{0x02})
				}
			}
		})
		wg.Go(func() {
			defer close(stop)
			w.expectCloseError(1000)
			closedAfter <- time.Since(start)
		})
		wg.Go(func() {
			expectCloseError(t, ctl, timeout+5*time.Second)
			closedAfter <- time.Since(start)
		})
	}
	wg.Wait()
	close(closedAfter)
	for after := range closedAfter {
		if after > timeout+3*time.Second {
			t.Errorf("a slowloris session was closed after %v, MessageTimeout %v", after, timeout)
		}
	}
	by.check(t, 10)
	if n := metric(t, d, "m2md_frames_refused_total", "reason=message_timeout") - before; n != 2*sessions {
		t.Errorf("message_timeout counted %v times, want %d", n, 2*sessions)
	}
}
