package upstream

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/configerr"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/openai"
)

// Defaults of Config.
const (
	DefaultConcurrency = 64
	// DefaultFirstByteTimeout is long: a non-streamed completion sends its
	// first byte only when the whole answer is written.
	DefaultFirstByteTimeout = 10 * time.Minute
	DefaultChunkTimeout     = 2 * time.Minute
	// DefaultMaxResponse is the protocol's largest frame.
	DefaultMaxResponse = negotiate.MaxPayloadLimit
	// maxErrorBody bounds an upstream error body passed on.
	maxErrorBody = 64 << 10
)

// ConfigError is the error New (and Models, for a server that lists no
// model) returns for a Config value that cannot work (errors.As finds it).
// Field names the setting, qualified as "upstream.Config.BaseURL", so that a
// command can name its flag instead.
type ConfigError = configerr.Error

// Qualified names of the fields errors name.
const (
	fieldBaseURL = "upstream.Config.BaseURL"
	fieldModels  = "upstream.Config.Models"
)

// Config configures an Upstream. Only BaseURL is required. Zero means the
// documented default; a negative number is an error (ConfigError).
type Config struct {
	// BaseURL is the server's OpenAI API root, e.g.
	// http://127.0.0.1:11434/v1; requests go to BaseURL + "/chat/completions"
	// (or the path of their API, frame.API.String, or "/embeddings").
	BaseURL string
	// APIKey, when set, is sent to the server as "Authorization: Bearer".
	APIKey string
	// Concurrency bounds the requests in flight at the server. A request
	// beyond it waits (at most FirstByteTimeout) for one to finish.
	// Default 64.
	Concurrency int
	// FirstByteTimeout bounds the wait for the server's response headers.
	// Default 10 min.
	FirstByteTimeout time.Duration
	// ChunkTimeout bounds the wait for each next piece of the body (a
	// stream's next event). Default 2 min.
	ChunkTimeout time.Duration
	// MaxResponse bounds a non-streamed body and one stream event, in
	// bytes. Default 16 MiB.
	MaxResponse int
	// Models, when set, are the only models served: a request whose body
	// names another is refused before it reaches the server. When empty,
	// the models served are those the last call of Upstream.Models
	// discovered; until then a request addressed to the agent (routed by
	// no model) is refused. Whatever Models holds, a body's model must be
	// the one its frame was routed by.
	Models []string
	// TracerProvider, when set, records a client span per request to the
	// server (trace.go); nil records none. The server gets a traceparent
	// either way when the delivery carried one.
	TracerProvider trace.TracerProvider
	// Logger gets one line per failed request; never bodies or the key.
	Logger zerolog.Logger
}

// Upstream forwards delivered requests to an OpenAI-compatible server.
type Upstream struct {
	cfg    Config
	base   string
	shown  string                          // base as logs and errors show it: credentials redacted
	served atomic.Pointer[map[string]bool] // nil: not known yet
	http   *http.Client
	tr     *http.Transport
	sem    chan struct{}
	// tracer records the spans (trace.go); nil: none. hostPort is the
	// server's, for them.
	tracer   trace.Tracer
	hostPort string
}

// New checks cfg and prepares the connection pool.
func New(cfg Config) (*Upstream, error) {
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		// Not quoted: it may hold credentials.
		return nil, configerr.New(fieldBaseURL, "upstream: "+fieldBaseURL+": want http(s)://host[:port]/path")
	}
	for _, n := range []struct {
		field string
		p     *int
		def   int
	}{{"upstream.Config.Concurrency", &cfg.Concurrency, DefaultConcurrency}, {"upstream.Config.MaxResponse", &cfg.MaxResponse, DefaultMaxResponse}} {
		if err := configerr.OrDefault(n.field, n.p, n.def); err != nil {
			return nil, fmt.Errorf("upstream: %w", err)
		}
	}
	for _, d := range []struct {
		field string
		p     *time.Duration
		def   time.Duration
	}{{"upstream.Config.FirstByteTimeout", &cfg.FirstByteTimeout, DefaultFirstByteTimeout}, {"upstream.Config.ChunkTimeout", &cfg.ChunkTimeout, DefaultChunkTimeout}} {
		if err := configerr.OrDefault(d.field, d.p, d.def); err != nil {
			return nil, fmt.Errorf("upstream: %w", err)
		}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// Keep one idle connection per request that may be in flight, so a
	// steady load never opens new connections.
	tr.MaxIdleConns = cfg.Concurrency
	tr.MaxIdleConnsPerHost = cfg.Concurrency
	tr.MaxConnsPerHost = cfg.Concurrency
	tr.ResponseHeaderTimeout = cfg.FirstByteTimeout
	up := &Upstream{
		cfg:   cfg,
		base:  strings.TrimRight(cfg.BaseURL, "/"),
		shown: strings.TrimRight(redact(u), "/"),
		// A redirect is refused, never followed: it would carry the key
		// and the body to wherever the server points.
		http: &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return errRedirect }},
		tr:   tr,
		sem:  make(chan struct{}, cfg.Concurrency),

		tracer:   tracerOf(cfg.TracerProvider),
		hostPort: hostPortOf(cfg.BaseURL),
	}
	if len(cfg.Models) > 0 {
		up.serve(cfg.Models)
	}
	return up, nil
}

// errRedirect: the server answered with a redirect.
var errRedirect = errors.New("the server answered with a redirect, which is not followed (it would carry the API key and the body elsewhere): give --base-url the final URL")

// URL is the server's API root as logs may show it: a user, password or
// query in it redacted.
func (u *Upstream) URL() string { return u.shown }

// redact shows u without its credentials: the user info and the query
// values (where some servers take a key) are replaced.
func redact(u *url.URL) string {
	c := *u
	if c.User != nil {
		c.User = url.User("REDACTED")
	}
	if c.RawQuery != "" {
		q := c.Query()
		for k := range q {
			q[k] = []string{"REDACTED"}
		}
		c.RawQuery = q.Encode()
	}
	c.Fragment, c.RawFragment = "", ""
	return c.String()
}

// scrub removes the URL from an HTTP client error (it may hold
// credentials), keeping the cause.
func scrub(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// Close closes the idle connections to the server.
func (u *Upstream) Close() { u.tr.CloseIdleConnections() }

// Models asks the server's GET /models for the ids of its models. Without
// Config.Models, they become the models served: a request naming another
// is refused.
func (u *Upstream) Models(ctx context.Context) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.base+"/models", nil)
	if err != nil {
		return nil, err
	}
	u.authorize(req)
	resp, err := u.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("upstream: GET %s/models: %w", u.shown, scrub(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("upstream: GET %s/models: HTTP %d", u.shown, resp.StatusCode)
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, int64(u.cfg.MaxResponse))).Decode(&list); err != nil {
		return nil, fmt.Errorf("upstream: GET %s/models: %w", u.shown, err)
	}
	var ids []string
	for _, m := range list.Data {
		if m.ID != "" {
			ids = append(ids, m.ID)
		}
	}
	if len(ids) == 0 {
		return nil, configerr.New(fieldModels, "upstream: GET %s/models lists no model; set "+fieldModels, u.shown)
	}
	if len(u.cfg.Models) == 0 {
		u.serve(ids)
	}
	return ids, nil
}

func (u *Upstream) authorize(req *http.Request) {
	if u.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+u.cfg.APIKey)
	}
}

var errChunkTimeout = errors.New("no data from the upstream within the chunk timeout")

// ServeM2M forwards one delivered request (client.Handler).
func (u *Upstream) ServeM2M(ctx context.Context, req *client.Request, w client.ResponseWriter) {
	ctx, w, endSpan := u.trace(ctx, req, w)
	defer endSpan()
	path := req.API.String()
	switch {
	case req.Embeddings:
		path = "/embeddings"
	case !req.API.Known():
		u.fail(w, req, openai.CodeUnsupportedAPI, fmt.Sprintf("the request names API byte %#02x, which this agent does not know (docs/protocol.md §4.6)", byte(req.API)), nil)
		return
	}
	if code, msg, ok := u.checkModel(req); !ok {
		u.fail(w, req, code, msg, nil)
		return
	}
	if err := u.acquire(ctx); err != nil {
		u.fail(w, req, openai.CodeUpstreamBusy, "the upstream has its maximum of requests in flight", err)
		return
	}
	defer func() { <-u.sem }()

	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	hreq, err := http.NewRequestWithContext(rctx, http.MethodPost, u.base+path, bytes.NewReader(req.Body))
	if err != nil {
		u.fail(w, req, openai.CodeUpstreamUnavailable, "bad upstream URL", err)
		return
	}
	hreq.Header.Set("Content-Type", "application/json")
	w3c.Inject(rctx, propagation.HeaderCarrier(hreq.Header)) // traceparent, tracestate
	if req.Stream {
		hreq.Header.Set("Accept", "text/event-stream")
	} else {
		hreq.Header.Set("Accept", "application/json")
	}
	u.authorize(hreq)
	resp, err := u.http.Do(hreq)
	if err != nil {
		u.failTransport(ctx, w, req, err, rctx)
		return
	}
	defer resp.Body.Close()
	if hw, ok := w.(client.HeaderWriter); ok && req.WantsHeaders {
		// The server's headers a client reads (docs/protocol.md §4.7),
		// before its answer or its error.
		if h := openai.HeadersJSON(resp.Header); h != nil {
			hw.Headers(h)
		}
	}
	// Every read of the body must make progress within ChunkTimeout.
	timer := time.AfterFunc(u.cfg.ChunkTimeout, func() { cancel(errChunkTimeout) })
	defer timer.Stop()
	body := &progressReader{r: resp.Body, timer: timer, d: u.cfg.ChunkTimeout}

	if resp.StatusCode >= 400 {
		b, _ := io.ReadAll(io.LimitReader(body, maxErrorBody))
		u.cfg.Logger.Warn().Int("status", resp.StatusCode).Str("path", path).Str("from", req.From).Msg("upstream answered with an HTTP error")
		if u.lacksAPI(req, resp.StatusCode, b) {
			u.fail(w, req, openai.CodeUnsupportedAPI, fmt.Sprintf("the model server of model %q does not serve POST %s (it answered HTTP %d): ask it another API, or another agent", req.Model, path, resp.StatusCode), nil)
			return
		}
		w.Error(openai.UpstreamHTTPCode(resp.StatusCode, resp.Header.Get("Retry-After")), string(b))
		return
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		u.relayStream(ctx, rctx, w, req, body)
		return
	}
	b, err := openai.ReadAll(io.LimitReader(body, int64(u.cfg.MaxResponse)+1), resp.ContentLength)
	switch {
	case err != nil:
		u.failTransport(ctx, w, req, err, rctx)
	case len(b) > u.cfg.MaxResponse:
		u.fail(w, req, openai.CodeBadUpstreamReply, fmt.Sprintf("the upstream's answer exceeds %d bytes", u.cfg.MaxResponse), nil)
	default:
		if err := w.Respond(b); err != nil && ctx.Err() == nil {
			u.fail(w, req, openai.CodeBadUpstreamReply, "the upstream's answer is not JSON", err)
		}
	}
}

// Bounds of the events relayed together.
const (
	maxBatch      = 256
	maxBatchBytes = 64 << 10
)

// relayStream turns the SSE events of body into stream chunks, one per
// event, and "[DONE]" into the final reply Done. Events that have already
// arrived whole go on together (Chunks: one reply for all of them where
// the requester takes batches); the relay never waits for an event to
// pass on those it has.
func (u *Upstream) relayStream(ctx, rctx context.Context, w client.ResponseWriter, req *client.Request, body io.Reader) {
	events := newEventReader(body, u.cfg.MaxResponse)
	defer events.release()
	batch, size := make([][]byte, 0, 16), 0
	// A Responses stream ends at the end of the body after a terminal
	// event, without [DONE] (docs/protocol.md §4.6).
	responses := req.API == frame.APIResponses
	var typ []byte
	terminal := false
	flush := func() bool {
		if len(batch) == 0 {
			return true
		}
		err := w.Chunks(batch...)
		batch = batch[:0]
		events.reuse()
		if err != nil {
			if ctx.Err() == nil {
				u.fail(w, req, openai.CodeBadUpstreamReply, "an upstream stream event is not JSON", err)
			}
			return false
		}
		return true
	}
	for {
		data, err := events.next()
		if err == nil && string(data) != "[DONE]" {
			if responses {
				var terr error
				if typ, terr = openai.EventType(typ[:0], data); terr != nil {
					if !flush() {
						return
					}
					u.fail(w, req, openai.CodeBadUpstreamReply, "an upstream Responses stream event is not a JSON object with a string \"type\"", terr)
					return
				}
				terminal = openai.Terminal(typ)
			}
			batch = append(batch, data)
			size += len(data)
			if len(batch) < maxBatch && size < maxBatchBytes && events.ready() {
				continue
			}
			size = 0
			if !flush() {
				return
			}
			continue
		}
		if !flush() {
			return
		}
		if responses && (err == nil || errors.Is(err, io.EOF)) {
			if !terminal {
				u.fail(w, req, openai.CodeBadUpstreamReply, "the upstream's Responses stream ended before a terminal event (response.completed, response.incomplete, response.failed, error)", nil)
				return
			}
			w.Respond([]byte(openai.Done))
			return
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				u.fail(w, req, openai.CodeBadUpstreamReply, "the upstream's stream ended without [DONE]", nil)
				return
			}
			if errors.Is(err, errEventTooLarge) {
				u.fail(w, req, openai.CodeBadUpstreamReply, err.Error(), nil)
				return
			}
			u.failTransport(ctx, w, req, err, rctx)
			return
		}
		w.Respond([]byte(openai.Done))
		return
	}
}

func (u *Upstream) acquire(ctx context.Context) error {
	select {
	case u.sem <- struct{}{}:
		return nil
	default:
	}
	t := time.NewTimer(u.cfg.FirstByteTimeout)
	defer t.Stop()
	select {
	case u.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return errors.New("timed out waiting for a free upstream slot")
	}
}

// failTransport reports a failed exchange with the upstream: a timeout, or
// an unreachable upstream. When the delivery itself ended (CANCEL, the
// session closed) there is nobody to tell.
func (u *Upstream) failTransport(ctx context.Context, w client.ResponseWriter, req *client.Request, err error, rctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	if errors.Is(err, errRedirect) {
		u.fail(w, req, openai.CodeBadUpstreamReply, errRedirect.Error(), nil)
		return
	}
	var ne net.Error
	if errors.Is(context.Cause(rctx), errChunkTimeout) || (errors.As(err, &ne) && ne.Timeout()) {
		u.fail(w, req, openai.CodeUpstreamTimeout, "the upstream did not answer in time", err)
		return
	}
	u.fail(w, req, openai.CodeUpstreamUnavailable, "the upstream could not be reached", err)
}

func (u *Upstream) fail(w client.ResponseWriter, req *client.Request, code negotiate.ErrorCode, message string, err error) {
	u.cfg.Logger.Warn().Str("code", string(code)).Err(scrub(err)).Str("from", req.From).Uint64("delivery", req.ID).Msg("request to the upstream failed")
	w.Error(code, message)
}

// progressReader pushes the chunk deadline back on every read that
// returns data.
type progressReader struct {
	r     io.Reader
	timer *time.Timer
	d     time.Duration
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.timer.Reset(p.d)
	}
	return n, err
}

var errEventTooLarge = errors.New("an upstream stream event exceeds the size limit")

// eventReader reads server-sent events (the WHATWG rules OpenAI servers
// follow): lines end in \n or \r\n; "data:" lines (one optional space
// after the colon) accumulate, joined by \n, until a blank line dispatches
// the event; comments (":…") and other fields are skipped.
//
// The data of the events next returns is kept in one buffer that reuse
// empties, so a stream's events cost no allocation each; the 64 KiB read
// buffer is pooled (release).
type eventReader struct {
	r     *bufio.Reader
	max   int
	buf   []byte // the data of the events returned since reuse
	start int    // where the data of the event being read begins in buf
	long  []byte // a line longer than the read buffer
	has   bool
}

// sseReaders holds the read buffers of finished streams.
var sseReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 64<<10) }}

func newEventReader(r io.Reader, max int) *eventReader {
	br := sseReaders.Get().(*bufio.Reader)
	br.Reset(r)
	return &eventReader{r: br, max: max}
}

// release returns the read buffer; e is not used after.
func (e *eventReader) release() {
	e.r.Reset(nil)
	sseReaders.Put(e.r)
	e.r = nil
}

// reuse lets the next events overwrite the data of those returned so far.
func (e *eventReader) reuse() { e.buf, e.start = e.buf[:0], 0 }

// next returns the next event's data, valid until reuse; io.EOF at the end
// of the body.
func (e *eventReader) next() ([]byte, error) {
	for {
		line, err := e.line()
		if err != nil {
			if errors.Is(err, io.EOF) && e.has {
				// A last event without its blank line still counts.
				return e.event(), nil
			}
			return nil, err
		}
		if len(line) == 0 {
			if e.has {
				return e.event(), nil
			}
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		if string(field) != "data" {
			continue
		}
		value = bytes.TrimPrefix(value, []byte(" "))
		if e.has {
			e.buf = append(e.buf, '\n')
		}
		if len(e.buf)-e.start+len(value) > e.max {
			return nil, errEventTooLarge
		}
		e.buf = append(e.buf, value...)
		e.has = true
	}
}

// event ends the event being read and returns its data.
func (e *eventReader) event() []byte {
	out := e.buf[e.start:len(e.buf):len(e.buf)]
	e.start, e.has = len(e.buf), false
	return out
}

// ready reports whether the next event has arrived whole, so that next
// returns it without reading from the body: the buffered bytes hold a data
// line and, after it, the blank line that dispatches it.
func (e *eventReader) ready() bool {
	buf, _ := e.r.Peek(e.r.Buffered())
	has := false
	for {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			return false
		}
		line := bytes.TrimSuffix(buf[:i], []byte("\r"))
		buf = buf[i+1:]
		switch {
		case len(line) == 0:
			if has {
				return true
			}
		case bytes.HasPrefix(line, []byte("data")) && (len(line) == 4 || line[4] == ':'):
			has = true
		}
	}
}

// line reads one line without its terminator, valid until the next read.
func (e *eventReader) line() ([]byte, error) {
	frag, err := e.r.ReadSlice('\n')
	out := frag
	if errors.Is(err, bufio.ErrBufferFull) {
		// Longer than the read buffer: gather it.
		e.long = append(e.long[:0], frag...)
		for errors.Is(err, bufio.ErrBufferFull) && len(e.long) <= e.max+16 {
			frag, err = e.r.ReadSlice('\n')
			e.long = append(e.long, frag...)
		}
		out = e.long
	}
	if len(out) > e.max+16 {
		return nil, errEventTooLarge
	}
	if err != nil && !(len(out) > 0 && errors.Is(err, io.EOF)) {
		return nil, err
	}
	out = bytes.TrimSuffix(out, []byte("\n"))
	out = bytes.TrimSuffix(out, []byte("\r"))
	return out, nil
}
