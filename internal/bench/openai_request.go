package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/m2md/m2md/negotiate"
)

// Failure reasons of an OpenAI request besides "http_<status>": every
// answer is checked, so that an endpoint answering fast with garbage is
// counted as failing, not as fast.
const (
	reasonConnection      = "connection"       // no answer: refused, reset, closed early
	reasonTimeout         = "timeout"          // no full answer within the timeout
	reasonCanceled        = "canceled"         // the run was interrupted
	reasonMalformed       = "malformed_body"   // a 2xx body that is no chat completion
	reasonMalformedChunk  = "malformed_chunk"  // a stream event that is no JSON
	reasonStreamTruncated = "stream_truncated" // a stream that ended without [DONE]
	reasonTooLarge        = "body_too_large"   // more than MaxResponseBytes
)

// openAICause says, per failure reason, what usually produces it and which
// flag changes it.
var openAICause = map[string]string{
	reasonConnection:      "the endpoint did not answer: check the URL, that it is running, and its log",
	reasonMalformed:       "2xx answers that are not chat completions (JSON objects with \"choices\"): is the URL an OpenAI-compatible base URL, ending in /v1?",
	reasonMalformedChunk:  "stream events whose data is not JSON",
	reasonStreamTruncated: "streams that ended without data: [DONE]: the endpoint cut them short, or does not stream (drop --stream)",
	reasonTooLarge:        "answers larger than --max-response-bytes",
	"http_401":            "the endpoint wants an API key: give --api-key",
	"http_404":            "no chat completions at that URL, or no such model: check the base URL (…/v1) and --model",
	"http_429":            "the endpoint's rate limits refused them: lower --rate or --connections, or raise its limits",
	reasonTimeout:         "answers took longer than --timeout: the endpoint is overloaded; lower --rate or --connections",
}

// do sends one request intended at intended (clock ns) and records its
// outcome; it returns the failure reason, or "" for a success.
func (t *openAITarget) do(ctx context.Context, intended int64, body []byte) string {
	reason := t.exchange(ctx, intended, body)
	if reason != "" {
		t.rec.failure(intended, reason)
	}
	return reason
}

// exchange makes the request and reads and checks the whole answer.
func (t *openAITarget) exchange(ctx context.Context, intended int64, body []byte) string {
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(body))
	if err != nil {
		return reasonConnection
	}
	req.Header.Set("Content-Type", "application/json")
	if t.stream {
		req.Header.Set("Accept", "text/event-stream")
	} else {
		req.Header.Set("Accept", "application/json")
	}
	if t.key != "" {
		req.Header.Set("Authorization", "Bearer "+t.key)
	}
	if t.traced {
		req.Header.Set("Traceparent", newTraceparent())
	}
	sent := t.clk.now()
	resp, err := t.client.Do(req)
	if err != nil {
		return transportReason(ctx, err)
	}
	defer resp.Body.Close()
	lr := &countingReader{r: io.LimitReader(resp.Body, t.maxBody+1)}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// Read what is small enough so the connection can be reused.
		_, _ = io.Copy(io.Discard, io.LimitReader(lr, 64<<10))
		return fmt.Sprintf("http_%d", resp.StatusCode)
	}
	var (
		reason string
		first  int64
	)
	if t.stream {
		reason, first = t.readStream(ctx, lr)
	} else {
		reason = t.readCompletion(ctx, lr)
	}
	if reason == "" && lr.n > int(t.maxBody) {
		reason = reasonTooLarge
	}
	if reason != "" {
		return reason
	}
	now := t.clk.now()
	if t.stream {
		t.rec.mu.Lock()
		measured := t.rec.inWindow(intended)
		t.rec.mu.Unlock()
		if measured {
			t.first.record(first - intended)
		}
	}
	t.rec.success(intended, sent, now, len(body), lr.n)
	return ""
}

// readCompletion reads a chat completion: a JSON object with choices.
func (t *openAITarget) readCompletion(ctx context.Context, r *countingReader) string {
	b, err := io.ReadAll(r)
	if err != nil {
		return transportReason(ctx, err)
	}
	if int64(len(b)) > t.maxBody {
		return reasonTooLarge
	}
	var c struct {
		Choices []json.RawMessage `json:"choices"`
	}
	if json.Unmarshal(b, &c) != nil || len(c.Choices) == 0 {
		return reasonMalformed
	}
	return ""
}

// maxEventLine bounds one line of a stream: a chunk is a few hundred bytes.
const maxEventLine = 1 << 20

// readStream reads server-sent events up to data: [DONE], checking that
// each event's data is JSON; first is when the first one arrived.
func (t *openAITarget) readStream(ctx context.Context, r *countingReader) (reason string, first int64) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxEventLine)
	for sc.Scan() {
		line := sc.Bytes()
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue // blank separators, comments, event: and id: lines
		}
		data = bytes.TrimSpace(data)
		if first == 0 {
			first = t.clk.now()
		}
		if string(data) == "[DONE]" {
			_, _ = io.Copy(io.Discard, r)
			return "", first
		}
		if !json.Valid(data) {
			return reasonMalformedChunk, first
		}
	}
	switch err := sc.Err(); {
	case errors.Is(err, bufio.ErrTooLong):
		return reasonTooLarge, first
	case err != nil:
		return transportReason(ctx, err), first
	case int64(r.n) > t.maxBody:
		return reasonTooLarge, first
	}
	return reasonStreamTruncated, first
}

// transportReason names the failure of a request that got no full answer.
func transportReason(ctx context.Context, err error) string {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded):
		return reasonTimeout
	case ctx.Err() != nil:
		return reasonCanceled
	}
	return reasonConnection
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// latencyRecorder is a histogram several goroutines record into.
type latencyRecorder struct {
	mu sync.Mutex
	h  *hdrhistogram.Histogram
}

func newLatencyRecorder() *latencyRecorder { return &latencyRecorder{h: newHistogram()} }

func (l *latencyRecorder) record(ns int64) {
	l.mu.Lock()
	recordLatency(l.h, time.Duration(ns))
	l.mu.Unlock()
}

func (l *latencyRecorder) summary() Latency {
	l.mu.Lock()
	defer l.mu.Unlock()
	return summarize(l.h)
}

// newTraceparent is a W3C traceparent naming a new trace, sampled, as a
// client whose every request is a root span would send: newTrace's block
// in text.
func newTraceparent() string {
	var tb [negotiate.TraceIDLen + negotiate.SpanIDLen + 2]byte
	b := newTrace(tb[:0])
	return "00-" + hex.EncodeToString(b[:negotiate.TraceIDLen]) + "-" +
		hex.EncodeToString(b[negotiate.TraceIDLen:negotiate.TraceIDLen+negotiate.SpanIDLen]) + "-01"
}
