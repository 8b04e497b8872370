package ingress

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/m2md/m2md/openai"
)

// budget counts the bytes of request bodies held at once, in all and per
// client IP (clientKey). max 0: no bound; share 0: no bound per client.
type budget struct {
	max   int64
	share int64

	mu   sync.Mutex // guards used and per
	used int64
	per  map[netip.Addr]int64 // only while share > 0
}

// take takes more bytes for a body of client that already holds held.
// When they do not fit it fails with errClientShare or errBodyBudget and
// gives the held bytes back in the same step: a refused body makes room
// at once for the bodies growing beside it, rather than after its answer
// is written, while other bodies see the budget still full and are refused
// too. Uploads that outgrow the budget together are thus refused only
// until the rest fit, and as many complete as it holds.
func (b *budget) take(client netip.Addr, held, more int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var err error
	switch {
	case b.share > 0 && b.per[client]+more > b.share:
		err = errClientShare
	case b.max > 0 && b.used+more > b.max:
		err = errBodyBudget
	default:
		b.add(client, more)
		return nil
	}
	b.add(client, -held)
	return err
}

func (b *budget) give(client netip.Addr, n int64) {
	b.mu.Lock()
	b.add(client, -n)
	b.mu.Unlock()
}

// add counts n more bytes (fewer, when negative) for client; b.mu held.
func (b *budget) add(client netip.Addr, n int64) {
	b.used += n
	if b.share <= 0 || n == 0 {
		return
	}
	if left := b.per[client] + n; left > 0 {
		if b.per == nil {
			b.per = map[netip.Addr]int64{}
		}
		b.per[client] = left
	} else {
		delete(b.per, client) // the map holds only clients reading bodies
	}
}

// bodyShare is a client's share of a body budget of total bytes: half of
// it, so that one client never holds it all, but at least a body of the
// largest size (maxBody, and the byte that tells a chunked body too
// large), so that every client may send one.
func bodyShare(total int64, maxBody int) int64 {
	if total <= 0 {
		return 0
	}
	return min(total, max(total/2, int64(maxBody)+1))
}

// firstBodyBuffer is the buffer a body starts in; it doubles from there up
// to the size the Content-Length announced, so a peer that announces a
// large body and sends little holds only about what it sent.
const firstBodyBuffer = 64 << 10

// errBodyBudget: taking the next buffer would put the bodies held over
// Limits.MaxBodyBytes.
var errBodyBudget = errors.New("request bodies held at the endpoint are at their maximum")

// errClientShare: taking the next buffer would put the bodies of one
// client IP over its share of the budget (bodyShare).
var errClientShare = errors.New("request bodies held for one client are at their maximum")

// body is a request body read under the byte budget; release gives its
// bytes back (the body is not used after).
type body struct {
	b      []byte
	held   int64
	owner  *budget
	client netip.Addr
}

func (b *body) release() {
	b.owner.give(b.client, b.held)
	b.held, b.b = 0, nil
}

// readBody reads r's body, at most max bytes, with every piece arriving
// within Limits.BodyTimeout, into buffers taken from the byte budget. On
// failure it has answered the client (unless the client is gone) and
// holds nothing.
func (in *Ingress) readBody(w http.ResponseWriter, r *http.Request, max int) (*body, bool) {
	if r.ContentLength > int64(max) {
		tooLarge(w, max)
		return nil, false
	}
	limit := int64(max) + 1 // one byte over tells a body too large
	if r.ContentLength >= 0 {
		limit = r.ContentLength
	}
	rc := http.NewResponseController(w)
	bd := &body{owner: &in.bodies, client: requestClient(r)}
	err := bd.read(r.Body, limit, rc, in.limits.BodyTimeout)
	if in.limits.BodyTimeout > 0 {
		// Cleared, or the server's watch for the client closing would
		// see the deadline pass during a long answer and cancel it.
		rc.SetReadDeadline(time.Time{})
	}
	switch {
	case err == nil && len(bd.b) > max:
		tooLarge(w, max)
	case err == nil:
		return bd, true
	case errors.Is(err, errBodyBudget):
		in.refusals.Add(1)
		openai.WriteError(w, http.StatusServiceUnavailable, fmt.Sprintf("the endpoint holds its maximum of request bodies (%d bytes) being read; retry", in.limits.MaxBodyBytes), "server_error", "server_busy", true)
	case errors.Is(err, errClientShare):
		in.refusals.Add(1)
		openai.WriteError(w, http.StatusTooManyRequests, fmt.Sprintf("the endpoint holds this client's share of request bodies being read (%d bytes of the %d of --openai-body-budget); retry when its other uploads are done", in.bodies.share, in.limits.MaxBodyBytes), "rate_limit_error", "server_busy", true)
	case isTimeout(err):
		openai.WriteError(w, http.StatusRequestTimeout, fmt.Sprintf("no part of the request body arrived within %v", in.limits.BodyTimeout), "invalid_request_error", "request_timeout", false)
	}
	// Otherwise the client is gone.
	bd.release()
	return nil, false
}

func (bd *body) read(r io.Reader, limit int64, rc *http.ResponseController, timeout time.Duration) error {
	for {
		if int64(len(bd.b)) == int64(cap(bd.b)) {
			if int64(cap(bd.b)) >= limit {
				// As much as announced (or one byte over the maximum):
				// the end must come now.
				var one [1]byte
				n, err := bd.readSome(r, one[:], rc, timeout)
				if n > 0 {
					bd.b = append(bd.b, one[0])
					return nil // over: the caller sees the length
				}
				if errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
			if err := bd.grow(limit); err != nil {
				return err
			}
		}
		n, err := bd.readSome(r, bd.b[len(bd.b):cap(bd.b)], rc, timeout)
		bd.b = bd.b[:len(bd.b)+n]
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func (bd *body) readSome(r io.Reader, p []byte, rc *http.ResponseController, timeout time.Duration) (int, error) {
	if timeout > 0 {
		rc.SetReadDeadline(time.Now().Add(timeout))
	}
	return r.Read(p)
}

// grow doubles the buffer (up to limit), taking the new bytes from the
// budget first.
func (bd *body) grow(limit int64) error {
	next := max(int64(firstBodyBuffer), 2*int64(cap(bd.b)))
	next = min(next, limit)
	more := next - int64(cap(bd.b))
	if err := bd.owner.take(bd.client, bd.held, more); err != nil {
		// Given back with the refusal; the buffer goes too, so that
		// while the answer is written it is not memory the budget no
		// longer counts.
		bd.held, bd.b = 0, nil
		return err
	}
	bd.held += more
	nb := make([]byte, len(bd.b), next)
	copy(nb, bd.b)
	bd.b = nb
	return nil
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// writeChunk bounds one write to the client: larger answers are written
// in pieces, each with its own deadline, so a slow reader that keeps
// reading gets all of it.
const writeChunk = 256 << 10

// deadlineWriter renews the connection's write deadline before every
// write and flush: an answer flows as long as the client reads it, and a
// client that stops reading for Limits.WriteTimeout fails the write,
// which ends the request (and cancels it at the provider). It records the
// status written, for the metrics and the request's span.
type deadlineWriter struct {
	http.ResponseWriter
	rc     *http.ResponseController
	d      time.Duration // 0: no deadline
	status int
}

func (in *Ingress) writer(w http.ResponseWriter) *deadlineWriter {
	return &deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), d: in.limits.WriteTimeout}
}

func (dw *deadlineWriter) renew() {
	if dw.d > 0 {
		dw.rc.SetWriteDeadline(time.Now().Add(dw.d))
	}
}

func (dw *deadlineWriter) WriteHeader(status int) {
	if dw.status == 0 {
		dw.status = status
	}
	dw.ResponseWriter.WriteHeader(status)
}

func (dw *deadlineWriter) Write(p []byte) (int, error) {
	if dw.status == 0 {
		dw.status = http.StatusOK
	}
	n := 0
	for len(p) > 0 {
		piece := p[:min(len(p), writeChunk)]
		dw.renew()
		m, err := dw.ResponseWriter.Write(piece)
		n += m
		if err != nil {
			return n, err
		}
		p = p[len(piece):]
	}
	return n, nil
}

func (dw *deadlineWriter) Flush() {
	dw.FlushError()
}

// FlushError is what http.ResponseController.Flush calls.
func (dw *deadlineWriter) FlushError() error {
	dw.renew()
	return dw.rc.Flush()
}

// Unwrap lets http.ResponseController reach the connection.
func (dw *deadlineWriter) Unwrap() http.ResponseWriter { return dw.ResponseWriter }

// requestClient is the client IP (an IPv6 client's /64) a request's body
// counts against.
func requestClient(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return clientKey(ap.Addr().Unmap())
}
