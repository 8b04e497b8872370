package ingress

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/jsonscan"
	"github.com/m2md/m2md/openai"
)

// quota is the state of one key name's limits: it lives across reloads of
// the keys file, so a reload neither resets nor forgets what was used.
type quota struct {
	name     string
	mu       sync.Mutex // guards limit, models, and the limiters' settings
	limit    KeyLimits
	models   map[string]bool
	rpm      *rate.Limiter // nil: no limit
	tpm      *bucket       // nil: no limit
	inflight atomic.Int64
}

// quotas holds the quota of every key name of the current keys file.
type quotas struct {
	mu     sync.Mutex
	byName map[string]*quota
}

// update applies the limits of a (re)loaded keys file: existing names keep
// their state under their new limits, new names start full, names gone
// are dropped.
func (qs *quotas) update(names map[string]KeyLimits) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	next := make(map[string]*quota, len(names))
	for name, l := range names {
		q := qs.byName[name]
		if q == nil {
			q = &quota{name: name}
		}
		q.set(l)
		next[name] = q
	}
	qs.byName = next
}

func (qs *quotas) get(name string) *quota {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	return qs.byName[name]
}

// all returns the quotas of the current names.
func (qs *quotas) all() []*quota {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	return slices.Collect(maps.Values(qs.byName))
}

func (q *quota) set(l KeyLimits) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.limit = l
	q.models = nil
	if len(l.Models) > 0 {
		q.models = map[string]bool{}
		for _, m := range l.Models {
			q.models[m] = true
		}
	}
	q.rpm = perMinute(q.rpm, l.RequestsPerMinute)
	switch {
	case l.TokensPerMinute == 0:
		q.tpm = nil
	case q.tpm == nil:
		q.tpm = newBucket(l.TokensPerMinute, time.Now())
	default:
		q.tpm.setLimit(l.TokensPerMinute, time.Now())
	}
}

// perMinute is a limiter of n per minute with a burst of n (nil for
// n == 0). Replacing lim, it carries over what was used of lim's burst,
// so that a new limit applies to the use so far: raised, the difference
// is there at once; lowered, what was used beyond it is owed.
func perMinute(lim *rate.Limiter, n int) *rate.Limiter {
	if n == 0 {
		return nil
	}
	now := time.Now()
	next := rate.NewLimiter(rate.Limit(float64(n)/60), n)
	if lim != nil {
		if used := int(math.Ceil(float64(lim.Burst()) - lim.TokensAt(now))); used > 0 {
			next.ReserveN(now, min(used, n))
		}
	}
	return next
}

// allows reports whether the key may ask for model.
func (q *quota) allows(model string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.models == nil || q.models[model]
}

// refusal is a request over one of its key's limits.
type refusal struct {
	limit string // OpenAI's error type for it: "requests", "tokens", "concurrent_requests"
	what  string
	max   int
	wait  time.Duration
}

func (r *refusal) write(w http.ResponseWriter, name string) {
	secs := max(1, int(math.Ceil(r.wait.Seconds())))
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	openai.WriteError(w, http.StatusTooManyRequests,
		fmt.Sprintf("rate limit reached for key %s on %s: limit %d; retry in %d s", name, r.what, r.max, secs),
		r.limit, "rate_limit_exceeded", false)
}

// ticket is an admitted request: done gives back its concurrency slot and
// settles its tokens.
type ticket struct {
	q        *quota
	reserved int
	prompt   int     // the prompt's estimate in reserved: body bytes / 4
	tokens   *bucket // where reserved was taken from
}

// admit takes a request slot and a request of the per-minute allowance,
// before the body is read.
func (q *quota) admit(now time.Time) (*ticket, *refusal) {
	q.mu.Lock()
	limit, rpm := q.limit, q.rpm
	q.mu.Unlock()
	if limit.Concurrent > 0 && q.inflight.Add(1) > int64(limit.Concurrent) {
		q.inflight.Add(-1)
		return nil, &refusal{"concurrent_requests", "concurrent requests", limit.Concurrent, time.Second}
	}
	if limit.Concurrent <= 0 {
		q.inflight.Add(1)
	}
	if rpm != nil {
		r := rpm.ReserveN(now, 1)
		if d := r.DelayFrom(now); !r.OK() || d > 0 {
			r.CancelAt(now)
			q.inflight.Add(-1)
			return nil, &refusal{"requests", "requests per minute (RPM)", limit.RequestsPerMinute, d}
		}
	}
	return &ticket{q: q}, nil
}

// ReservedCompletionTokens is what a request without max_tokens (or
// max_completion_tokens) reserves for its answer from its key's tokens
// per minute: without it, a burst of such requests would reserve only
// their prompts, and a stream that never reports its usage would cost
// next to nothing.
const ReservedCompletionTokens = 4096

// reserve takes the tokens the request may use from the per-minute
// allowance: its max_tokens (or max_completion_tokens, or else
// ReservedCompletionTokens) and its prompt, estimated at 4 bytes a token,
// so a burst of requests cannot overrun the limit before their answers
// tell what they used. An answer without usage (a stream that did not ask
// for stream_options.include_usage) is charged its reservation.
//
// A Responses request (api frame.APIResponses) bounds its answer with
// max_output_tokens instead.
func (t *ticket) reserve(sum *jsonscan.Summary, body []byte, api frame.API, now time.Time) *refusal {
	q := t.q
	q.mu.Lock()
	tpm, limit := q.tpm, q.limit.TokensPerMinute
	q.mu.Unlock()
	if tpm == nil {
		return nil
	}
	n := len(body) / 4
	out, outOK := uint64(0), false
	if api == frame.APIResponses {
		out, outOK = openai.MaxOutputTokens(body)
	}
	switch {
	case outOK:
		n += int(min(out, maxLimit))
	case api == frame.APIResponses:
		n += ReservedCompletionTokens
	case sum.MaxTokens.OK:
		n += int(min(sum.MaxTokens.Value, maxLimit))
	case sum.MaxCompletionTokens.OK:
		n += int(min(sum.MaxCompletionTokens.Value, maxLimit))
	default:
		n += ReservedCompletionTokens
	}
	// One request may take the whole minute's allowance, never more.
	n = max(1, min(n, tpm.size()))
	if d, ok := tpm.take(n, now); !ok {
		return &refusal{"tokens", "tokens per minute (TPM)", limit, d}
	}
	t.reserved, t.prompt, t.tokens = n, len(body)/4, tpm
	return nil
}

// charge is what a request's answer costs: its usage when it told it;
// else, for a stream, its prompt's estimate and a token a chunk (a chat
// or completions stream sends about one token a chunk) when that is more
// than it reserved, so that a stream without max_tokens and without usage
// that runs past its reservation pays for what it streamed (under a
// tokens-per-minute limit only: the tokens metric counts usage). known
// false: the reservation stands.
func (t *ticket) charge(u tokenUse) (int, bool) {
	if u.known {
		return u.n, true
	}
	if est := t.prompt + u.chunks; t.tokens != nil && u.chunks > 0 && est > t.reserved {
		return est, true
	}
	return 0, false
}

// done ends the request: used is the tokens its answer's usage counted
// (known false when the answer had none: the reservation stands; a request
// that got no answer is settled at 0, known).
func (t *ticket) done(used int, known bool) {
	q := t.q
	q.inflight.Add(-1)
	if t.tokens != nil && known {
		// A bucket replaced by a reload meanwhile is settled all the
		// same: the tokens were taken from it.
		t.tokens.settle(t.reserved, used, time.Now())
	}
}

// usageOf returns the tokens an answer (a body or a stream chunk) of api
// counts in its "usage".
func usageOf(b []byte, api frame.API) (int, bool) {
	if !bytes.Contains(b, []byte(`"usage"`)) {
		return 0, false
	}
	if api == frame.APIResponses {
		n, ok := openai.ResponsesUsage(b)
		return int(min(n, maxLimit)), ok
	}
	var sum jsonscan.Summary
	if sum.Scan(b, jsonscan.Limits{}) != nil || !sum.PromptTokens.OK {
		return 0, false
	}
	n := min(sum.PromptTokens.Value, maxLimit)
	if sum.CompletionTokens.OK {
		n += min(sum.CompletionTokens.Value, maxLimit)
	}
	return int(n), true
}
