package ingress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/configerr"
	"github.com/m2md/m2md/internal/jsonscan"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/openai"
)

// Defaults of Config.
const (
	// DefaultAddr is where m2md serve listens for OpenAI clients.
	DefaultAddr = "127.0.0.1:8000"
	// DefaultMaxBody is the protocol's largest frame.
	DefaultMaxBody = negotiate.MaxPayloadLimit
	// DefaultTimeout bounds each wait for a reply: long enough for a long
	// non-streamed completion.
	DefaultTimeout = 10 * time.Minute
	// OpenIdentity is the agent id of an ingress without keys.
	OpenIdentity = "openai-ingress"
)

// ConfigError is the error New and SetKeys return for a Config value out of
// its range or in conflict with another (errors.As finds it). Field names
// the setting at fault, qualified as "ingress.Config.Keys" or
// "ingress.Limits.MaxBodyBytes"; every other field its message names is
// written the same way, so that a command can name its flags instead.
type ConfigError = configerr.Error

// Qualified names of the fields errors name.
const (
	fieldKeys         = "ingress.Config.Keys"
	fieldNode         = "ingress.Config.Node"
	fieldMaxBodyBytes = "ingress.Limits.MaxBodyBytes"
)

// Config configures an Ingress. Dial and Models are required. Zero means
// the documented default; a negative number is an error (ConfigError),
// except in Limits, whose every bound a negative value removes.
type Config struct {
	// Dial opens the mesh session of an identity (the daemon's cmd wires
	// it to client.Dial on the daemon's own listener).
	Dial func(ctx context.Context, id Identity) (*client.Client, error)
	// Models lists the models served in an org now (daemon.Server.Models).
	Models func(org string) []string
	// Keys, when set, are required on every request, and their limits
	// hold (SetKeys replaces them). Without them every request acts as
	// Identity{AgentID: OpenIdentity}.
	Keys *Keys
	// Registerer, when set, gets the endpoint's metrics per key name.
	Registerer prometheus.Registerer
	// Node is the cluster node id of the daemon the ingress runs beside
	// ("" without a cluster). When set, every identity's agent id on the
	// mesh is NodeIdentity's, AGENT_ID-NODE, so that each node's ingress
	// is its own agent: agent ids are unique across a cluster, and two
	// nodes holding one id would refuse or replace each other.
	Node string
	// MaxBody bounds a request body. Default 16 MiB; negative is an error.
	MaxBody int
	// Timeout bounds each wait for a reply: the answer, or a stream's
	// first chunk and then each next one (a stream whose chunks keep
	// coming runs as long as it lasts). Default 10 min; negative is an
	// error.
	Timeout time.Duration
	// Limits bound what clients hold at the endpoint (connections,
	// deadlines, request bodies in flight); each zero field is its
	// default, and a negative one removes its bound.
	Limits Limits
	// TracerProvider, when set, records a span per request to a model
	// (trace.go); nil records none.
	TracerProvider trace.TracerProvider
	// Logger gets one line per failed request: never bodies or keys.
	Logger zerolog.Logger
}

// NodeIdentity is the identity id acts as on the mesh when the ingress runs
// beside cluster node node: the agent id gets "-" and the node id appended
// (openai-ingress-n1), the org stays. Without a node it is id itself.
func NodeIdentity(id Identity, node string) Identity {
	if node != "" {
		id.AgentID += "-" + node
	}
	return id
}

// Ingress is the HTTP handler. Close ends its sessions.
type Ingress struct {
	cfg     Config
	limits  Limits
	mux     *http.ServeMux
	bodies  budget
	keys    atomic.Pointer[Keys]
	quotas  quotas
	metrics *metrics
	tracer  trace.Tracer // nil: no spans (trace.go)

	agentsMu sync.Mutex // guards agents: SetKeys adds identities
	agents   map[Identity]*agent
	reloadMu sync.Mutex   // one SetKeys at a time
	refusals atomic.Int64 // requests refused for the body budget

	life    context.Context // ended by Close: stops the redials
	end     context.CancelFunc
	wg      sync.WaitGroup
	closeMu sync.Once

	srvMu sync.Mutex
	srv   *http.Server
}

// New dials the session of every identity and returns the handler.
func New(ctx context.Context, cfg Config) (*Ingress, error) {
	if cfg.Dial == nil || cfg.Models == nil {
		return nil, errors.New("ingress: Dial and Models are required")
	}
	if err := configerr.OrDefault("ingress.Config.MaxBody", &cfg.MaxBody, DefaultMaxBody); err != nil {
		return nil, fmt.Errorf("ingress: %w", err)
	}
	if err := configerr.OrDefault("ingress.Config.Timeout", &cfg.Timeout, DefaultTimeout); err != nil {
		return nil, fmt.Errorf("ingress: %w", err)
	}
	limits := cfg.Limits.withDefaults()
	if limits.MaxBodyBytes > 0 && limits.MaxBodyBytes < int64(cfg.MaxBody) {
		return nil, configerr.New(fieldMaxBodyBytes, "ingress: "+fieldMaxBodyBytes+" (%d) is below ingress.Config.MaxBody (%d): a body of the largest size could never be read", limits.MaxBodyBytes, cfg.MaxBody)
	}
	in := &Ingress{cfg: cfg, limits: limits, agents: map[Identity]*agent{}, tracer: tracerOf(cfg.TracerProvider)}
	in.bodies.max = limits.MaxBodyBytes
	in.bodies.share = bodyShare(limits.MaxBodyBytes, cfg.MaxBody)
	in.life, in.end = context.WithCancel(context.Background())
	var err error
	if in.metrics, err = newMetrics(cfg.Registerer); err != nil {
		return nil, err
	}
	ids := []Identity{{AgentID: OpenIdentity}}
	if cfg.Keys.Len() > 0 {
		ids = cfg.Keys.Identities()
		in.keys.Store(cfg.Keys)
		in.quotas.update(cfg.Keys.names())
		in.metrics.names(cfg.Keys.names())
	}
	if err := in.dialAll(ctx, ids); err != nil {
		in.Close()
		return nil, err
	}
	in.mux = http.NewServeMux()
	// The catch-all below would answer a known path asked with the wrong
	// method 404 (the mux's own 405 only comes when no pattern matches):
	// allow keeps each path's method to answer 405 with Allow instead.
	allow := map[string]string{}
	handle := func(method, path string, h http.HandlerFunc) {
		in.mux.HandleFunc(method+" "+path, h)
		allow[path] = method
	}
	for path, ep := range endpoints {
		handle(http.MethodPost, path, func(w http.ResponseWriter, r *http.Request) {
			in.serveRequest(w, r, ep)
		})
	}
	handle(http.MethodGet, "/v1/models", in.serveModels)
	in.mux.HandleFunc("GET /v1/models/{id...}", in.serveModel)
	in.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if method, ok := allow[r.URL.Path]; ok {
			w.Header().Set("Allow", method)
			openai.WriteError(w, http.StatusMethodNotAllowed, r.URL.Path+" takes "+method+", not "+r.Method, "invalid_request_error", "method_not_allowed", false)
			return
		}
		openai.WriteError(w, http.StatusNotFound, "unknown endpoint "+r.Method+" "+r.URL.Path, "invalid_request_error", "unknown_url", false)
	})
	return in, nil
}

// Close ends the ingress's sessions.
func (in *Ingress) Close() {
	in.closeMu.Do(func() {
		in.end()
		in.agentsMu.Lock()
		for _, a := range in.agents {
			a.drop()
		}
		in.agentsMu.Unlock()
		in.wg.Wait()
	})
}

// ServeHTTP implements http.Handler.
func (in *Ingress) ServeHTTP(w http.ResponseWriter, r *http.Request) { in.mux.ServeHTTP(w, r) }

// caller is who sent a request: its identity, the identity's session,
// and the quota of its key's name (nil without keys).
type caller struct {
	id Identity
	c  *client.Client
	q  *quota
}

// identity finds the caller, or answers 401.
func (in *Ingress) identity(w http.ResponseWriter, r *http.Request) (caller, bool) {
	keys := in.keys.Load()
	if keys.Len() == 0 {
		id := Identity{AgentID: OpenIdentity}
		return caller{id: id, c: in.agent(id).c.Load()}, true
	}
	key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if ok {
		if e, found := keys.entry(strings.TrimSpace(key)); found {
			// A reload may have removed the identity since keys was
			// loaded: its key is refused, as the new file says.
			if q, a := in.quotas.get(e.name), in.agent(e.id); q != nil && a != nil {
				return caller{id: e.id, c: a.c.Load(), q: q}, true
			}
		}
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="m2md"`)
	openai.WriteError(w, http.StatusUnauthorized, "missing or unknown API key: send Authorization: Bearer KEY with a key of --openai-keys-file", "invalid_request_error", "invalid_api_key", false)
	return caller{}, false
}

func (in *Ingress) agent(id Identity) *agent {
	in.agentsMu.Lock()
	defer in.agentsMu.Unlock()
	return in.agents[id]
}

// model is OpenAI's model object.
type model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// models lists the models the caller may use now.
func (in *Ingress) models(cl caller) []model {
	out := []model{}
	for _, m := range in.cfg.Models(cl.id.Org) {
		if cl.q == nil || cl.q.allows(m) {
			out = append(out, model{ID: m, Object: "model", OwnedBy: "m2md"})
		}
	}
	return out
}

// serveModel answers GET /v1/models/{id}: the model's object while an
// agent of the caller's org serves it (and its key may use it), else 404.
func (in *Ingress) serveModel(w http.ResponseWriter, r *http.Request) {
	cl, ok := in.identity(w, r)
	if !ok {
		return
	}
	id := r.PathValue("id")
	for _, m := range in.models(cl) {
		if m.ID == id {
			b, _ := json.Marshal(m)
			w.Header().Set("Content-Type", "application/json")
			w.Write(b)
			return
		}
	}
	openai.WriteError(w, http.StatusNotFound, fmt.Sprintf("no agent serves model %q now", id), "invalid_request_error", "model_not_found", false)
}

func (in *Ingress) serveModels(w http.ResponseWriter, r *http.Request) {
	cl, ok := in.identity(w, r)
	if !ok {
		return
	}
	list := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list", Data: in.models(cl)}
	b, _ := json.Marshal(list)
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

// endpoint is how the requests of one HTTP path travel: the schema of
// their frames and, for schema 01, the API byte (docs/protocol.md §4.6).
type endpoint struct {
	schema frame.Schema
	api    frame.API
}

// endpoints are the POST paths served, each a mesh request.
var endpoints = map[string]endpoint{
	"/v1/chat/completions": {frame.SchemaRequest, frame.APIChat},
	"/v1/responses":        {frame.SchemaRequest, frame.APIResponses},
	"/v1/completions":      {frame.SchemaRequest, frame.APICompletions},
	"/v1/embeddings":       {frame.SchemaEmbeddingRequest, frame.APIChat},
}

func (in *Ingress) serveRequest(hw http.ResponseWriter, r *http.Request, ep endpoint) {
	w := in.writer(hw)
	r, endSpan := in.trace(w, r, ep)
	defer endSpan()
	cl, ok := in.identity(w, r)
	if !ok {
		return
	}
	id, c := cl.id, cl.c
	var (
		t    *ticket
		used tokenUse
		// answered: a provider's answer reached the client. Until then
		// no tokens were used: a request that fails before (refused,
		// unroutable, timed out, an upstream's HTTP error) gives back
		// all it reserved.
		answered bool
	)
	if cl.q != nil {
		defer func() { in.metrics.request(cl.q.name, w.status) }()
		var ref *refusal
		if t, ref = cl.q.admit(time.Now()); ref != nil {
			in.metrics.refused(cl.q.name, ref.limit)
			ref.write(w, cl.q.name)
			return
		}
		defer func() {
			if !answered {
				used = tokenUse{known: true}
			}
			n, known := t.charge(used)
			t.done(n, known)
			if known {
				in.metrics.tokens(cl.q.name, n)
			}
		}()
	}
	bd, ok := in.readBody(w, r, in.cfg.MaxBody)
	if !ok {
		return
	}
	// The body's bytes count against the budget until the request is
	// sent; the session keeps what it needs of it (deltas) in its own
	// bounded history.
	defer bd.release()
	body := bd.b
	// One scan checks the JSON and finds the model, the stream flag and
	// whether it is a chat request (the client's encoder scans once more
	// to frame it).
	sum := summaries.Get().(*jsonscan.Summary)
	defer func() {
		*sum = jsonscan.Summary{Roles: sum.Roles[:0]} // do not pin the body
		summaries.Put(sum)
	}()
	if err := sum.Scan(body, jsonscan.Limits{}); err != nil {
		if errors.Is(err, jsonscan.ErrSyntax) {
			openai.WriteError(w, http.StatusBadRequest, "request body is not valid JSON: "+err.Error(), "invalid_request_error", "invalid_json", false)
		} else {
			badFrame(w, err) // deeper, longer or larger than the protocol's limits
		}
		return
	}
	if !sum.TopObject {
		openai.WriteError(w, http.StatusBadRequest, "request body is not a JSON object", "invalid_request_error", "invalid_json", false)
		return
	}
	if !sum.Model.IsString || sum.Model.Len == 0 || sum.Model.Len > negotiate.MaxModelLen {
		openai.WriteError(w, http.StatusBadRequest, fmt.Sprintf("\"model\" must be a string of 1-%d bytes", negotiate.MaxModelLen), "invalid_request_error", "invalid_model", false)
		return
	}
	if cl.q != nil {
		if model := sum.Model.AppendDecoded(nil); !cl.q.allows(string(model)) {
			openai.WriteError(w, http.StatusForbidden, fmt.Sprintf("key %s may not use model %q", cl.q.name, model), "invalid_request_error", "model_not_allowed", false)
			return
		}
		if ref := t.reserve(sum, body, ep.api, time.Now()); ref != nil {
			in.metrics.refused(cl.q.name, ref.limit)
			ref.write(w, cl.q.name)
			return
		}
	}
	traceModel(r.Context(), sum)
	stream, chat := sum.StreamTrue, sum.Keys.Has(jsonscan.KeyMessages|jsonscan.KeyModel)
	wait := newReplyWait(r.Context(), in.cfg.Timeout)
	defer wait.stop()
	ctx := wait.ctx
	var st *client.Stream
	var err error
	if ep.schema == frame.SchemaRequest && ep.api == frame.APIChat && chat {
		// A chat request goes to the client as JSON (it frames it as a
		// request: it has messages and a model), so that the turns of a
		// conversation travel as deltas (feature delta, docs/protocol.md
		// §4.3) without the HTTP client knowing.
		st, err = c.Stream(ctx, body, client.ResponseHeaders())
	} else {
		var fr []byte
		if fr, err = frame.AppendEncodeSchema(nil, body, ep.schema, frame.Limits{Quality: openai.CompressionQuality, CompressFrom: openai.CompressFrom}); err != nil {
			badFrame(w, err)
			return
		}
		if ep.api != frame.APIChat {
			if err = frame.SetAPI(fr, ep.api); err != nil {
				badFrame(w, err)
				return
			}
		}
		st, err = c.SendFrame(ctx, fr, client.ResponseHeaders())
	}
	body = nil
	bd.release()
	if framingError(err) {
		badFrame(w, err)
		return
	}
	if err != nil {
		in.writeError(w, r, id, wait.why(err))
		return
	}
	defer st.Close()
	first, final, err := wait.next(st)
	if h := st.Headers(); h != nil {
		// The model server's x-request-id, x-ratelimit-*, … (with its
		// answer or its error).
		openai.SetHeaders(w.Header(), h)
	}
	if err != nil {
		in.writeError(w, r, id, err)
		return
	}
	if !stream || (final && string(first) != openai.Done) {
		// One answer (a stream request the upstream answered in one body
		// is passed on as it came).
		if t != nil {
			used.n, used.known = usageOf(first, ep.api)
		}
		answered = true
		w.Header().Set("Content-Type", "application/json")
		w.Write(first)
		return
	}
	answered = true
	var count *tokenUse
	if t != nil {
		count = &used
	}
	in.relayStream(w, r, id, ep.api, st, wait, first, final, count)
}

// MaxRetryAfter bounds the Retry-After a provider's error passes on to
// clients: any agent can serve a model, and a client library that honours
// Retry-After must not be told to wait for days.
const MaxRetryAfter = 5 * time.Minute

// clampRetryAfter bounds secs, whole seconds (up to 8 digits, as
// openai.UpstreamHTTPStatus returns them), at MaxRetryAfter.
func clampRetryAfter(secs string) string {
	n, err := strconv.Atoi(secs)
	if err != nil || n > int(MaxRetryAfter/time.Second) {
		return strconv.Itoa(int(MaxRetryAfter / time.Second))
	}
	return secs
}

// framingError reports an error of the request's own JSON (its depth, a
// string or array over the limits, a model over 255 bytes): the client's
// fault, answered 400, not the mesh's.
func framingError(err error) bool {
	return errors.Is(err, frame.ErrLimit) || errors.Is(err, frame.ErrInvalidJSON) ||
		errors.Is(err, frame.ErrFieldTooLong) || errors.Is(err, frame.ErrSchema)
}

func tooLarge(w http.ResponseWriter, max int) {
	openai.WriteError(w, http.StatusBadRequest, fmt.Sprintf("request body exceeds %d bytes", max), "invalid_request_error", "request_too_large", false)
}

// summaries keeps the Roles buffers of request scans.
var summaries = sync.Pool{New: func() any { return new(jsonscan.Summary) }}

func badFrame(w http.ResponseWriter, err error) {
	openai.WriteError(w, http.StatusBadRequest, "request cannot be framed: "+err.Error(), "invalid_request_error", "invalid_request", false)
}

// relayStream writes the replies as server-sent events, flushing whenever
// no further reply is waiting.
// When used is set, it gets the tokens a chunk's usage counts.
//
// A Responses stream (api frame.APIResponses) is written as the Responses
// API's typed events, "event: TYPE" before each data line, and ends
// without "data: [DONE]".
func (in *Ingress) relayStream(w http.ResponseWriter, r *http.Request, id Identity, api frame.API, st *client.Stream, wait *replyWait, chunk []byte, final bool, used *tokenUse) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	buf := make([]byte, 0, 4096)
	responses := api == frame.APIResponses
	for {
		buf = buf[:0]
		switch {
		case final && string(chunk) == openai.Done:
			if !responses {
				buf = append(buf, "data: [DONE]\n\n"...)
			}
		default:
			if used != nil {
				used.chunks++
				if n, ok := usageOf(chunk, api); ok {
					used.n, used.known = n, true
				}
			}
			if responses {
				buf = append(buf, "event: "...)
				var err error
				if buf, err = openai.EventType(buf, chunk); err != nil {
					in.cfg.Logger.Warn().Str("agent", id.AgentID).Str("code", string(openai.CodeBadUpstreamReply)).Msg("stream failed")
					streamError(w, responses, openai.CodeBadUpstreamReply, err.Error())
					return
				}
				buf = append(buf, '\n')
			}
			buf = append(buf, "data: "...)
			buf = append(buf, chunk...)
			buf = append(buf, "\n\n"...)
		}
		if _, err := w.Write(buf); err != nil {
			return // the client is gone: closing the stream cancels it
		}
		// Replies that have already arrived go out with this one: one
		// flush (one write to the client) for what is there, instead of
		// one per chunk, and never a wait for a chunk still to come.
		if final || st.Buffered() == 0 {
			if err := rc.Flush(); err != nil {
				return
			}
		}
		if final {
			return
		}
		var err error
		chunk, final, err = wait.next(st)
		if err != nil {
			// Too late for a status: say it in the stream, as OpenAI does,
			// and end without [DONE] so the client sees the failure.
			if r.Context().Err() == nil {
				code, msg := in.describe(err)
				in.cfg.Logger.Warn().Str("agent", id.AgentID).Str("code", string(code)).Msg("stream failed")
				streamError(w, responses, code, msg)
			}
			return
		}
	}
}

// streamError ends a stream that has begun with its failure, as OpenAI
// does: one last event {"error":{…}} (named "error" in a Responses
// stream), without [DONE], so the client sees the failure.
func streamError(w http.ResponseWriter, responses bool, code negotiate.ErrorCode, msg string) {
	s := openai.StatusFor(code)
	b := make([]byte, 0, 256)
	if responses {
		b = append(b, "event: error\n"...)
	}
	b = append(b, "data: "...)
	b = append(b, openai.ErrorJSON(msg, s.Type, s.Code)...)
	w.Write(append(b, "\n\n"...))
	http.NewResponseController(w).Flush()
}

// describe turns a mesh or client error into a code and message.
func (in *Ingress) describe(err error) (negotiate.ErrorCode, string) {
	var rerr *client.RemoteError
	switch {
	case errors.As(err, &rerr):
		return rerr.Code, rerr.Message
	case errors.Is(err, client.ErrTooLarge):
		return negotiate.CodeTooLarge, err.Error()
	case errors.Is(err, context.DeadlineExceeded):
		return openai.CodeUpstreamTimeout, fmt.Sprintf("no reply within %v", in.cfg.Timeout)
	case errors.Is(err, client.ErrConnectionLost), errors.Is(err, client.ErrClosed):
		return negotiate.CodeShutdown, "the ingress's mesh session is down; retry"
	}
	return openai.CodeBadUpstreamReply, err.Error()
}

// writeError answers a request that failed before its first reply.
func (in *Ingress) writeError(w http.ResponseWriter, r *http.Request, id Identity, err error) {
	if r.Context().Err() != nil {
		return // the client left; nobody reads the answer
	}
	code, msg := in.describe(err)
	if status, retryAfter, ok := openai.UpstreamHTTPStatus(code); ok {
		// The upstream's own error, status and body as it sent them, and
		// its Retry-After.
		w.Header().Set("Content-Type", "application/json")
		if retryAfter != "" {
			w.Header().Set("Retry-After", clampRetryAfter(retryAfter))
		}
		w.WriteHeader(status)
		if isErrorJSON(msg) {
			io.WriteString(w, msg)
		} else {
			// A server's own text ("404 page not found"): in OpenAI's
			// shape, which the SDKs parse.
			typ := "invalid_request_error"
			if status >= 500 {
				typ = "server_error"
			}
			w.Write(openai.ErrorJSON(fmt.Sprintf("the model server answered HTTP %d: %s", status, msg), typ, fmt.Sprintf("upstream_http_%d", status)))
		}
		return
	}
	s := openai.StatusFor(code)
	in.cfg.Logger.Debug().Str("agent", id.AgentID).Str("code", string(code)).Int("status", s.HTTP).Msg("request failed")
	openai.WriteError(w, s.HTTP, msg, s.Type, s.Code, s.RetryAfter)
}

// isErrorJSON reports whether an upstream's error body is OpenAI's error
// JSON, an object with an "error" member.
func isErrorJSON(msg string) bool {
	var e struct {
		Error json.RawMessage `json:"error"`
	}
	return json.Unmarshal([]byte(msg), &e) == nil && len(e.Error) > 0
}
