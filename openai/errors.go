package openai

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/m2md/m2md/negotiate"
)

// Done is the final reply of a streamed answer: the upstream's
// "data: [DONE]", as a JSON string.
const Done = `"[DONE]"`

// Error codes the egress sends besides the mesh's (negotiate.ErrorCode).
const (
	// CodeUpstreamTimeout: the upstream sent no first byte, or no next
	// chunk, within the egress's timeout.
	CodeUpstreamTimeout negotiate.ErrorCode = "upstream_timeout"
	// CodeUpstreamUnavailable: the upstream could not be reached (refused,
	// reset, DNS) or broke off its answer.
	CodeUpstreamUnavailable negotiate.ErrorCode = "upstream_unavailable"
	// CodeUpstreamBusy: the egress has its maximum of requests at the
	// upstream in flight and none finished in time.
	CodeUpstreamBusy negotiate.ErrorCode = "upstream_busy"
	// CodeBadUpstreamReply: the upstream's answer is not what the OpenAI API
	// promises (not JSON, too large, a stream without [DONE]).
	CodeBadUpstreamReply negotiate.ErrorCode = "bad_upstream_reply"
	// CodeUnsupportedAPI: the provider does not serve the API the request
	// names (docs/protocol.md §4.6): an API byte it does not know, or its
	// server has no such endpoint.
	CodeUnsupportedAPI negotiate.ErrorCode = "unsupported_api"

	upstreamHTTPPrefix = "upstream_http_"
	retryAfterInfix    = "_retry_after_"
)

// UpstreamHTTPCode is the error code that carries an upstream's HTTP error
// status and, when the upstream sent one, its Retry-After as whole seconds:
// "upstream_http_NNN" or "upstream_http_NNN_retry_after_S". retryAfter is
// the header's value (delta-seconds or an HTTP date, RFC 9110 §10.2.3); an
// empty or unreadable one is left out.
func UpstreamHTTPCode(status int, retryAfter string) negotiate.ErrorCode {
	code := upstreamHTTPPrefix + strconv.Itoa(status)
	if s, ok := retryAfterSeconds(retryAfter, time.Now()); ok {
		code += retryAfterInfix + strconv.Itoa(s)
	}
	return negotiate.ErrorCode(code)
}

// maxRetryAfter bounds the seconds a Retry-After carries across the mesh.
const maxRetryAfter = 1 << 24

func retryAfterSeconds(v string, now time.Time) (int, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.Atoi(v); err == nil {
		return min(n, maxRetryAfter), n >= 0
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	d := t.Sub(now)
	if d < 0 {
		return 0, true
	}
	return min(int((d+time.Second-1)/time.Second), maxRetryAfter), true
}

// UpstreamHTTPStatus returns the status an upstream_http_NNN code carries,
// and its Retry-After in seconds ("" when it has none).
func UpstreamHTTPStatus(code negotiate.ErrorCode) (status int, retryAfter string, ok bool) {
	rest, ok := strings.CutPrefix(string(code), upstreamHTTPPrefix)
	if !ok || len(rest) < 3 {
		return 0, "", false
	}
	n, err := strconv.Atoi(rest[:3])
	if err != nil || n < 400 || n > 599 || rest[0] == '+' || rest[0] == '-' {
		return 0, "", false
	}
	if rest = rest[3:]; rest == "" {
		return n, "", true
	}
	secs, ok := strings.CutPrefix(rest, retryAfterInfix)
	if !ok || secs == "" || len(secs) > 8 || strings.Trim(secs, "0123456789") != "" {
		return 0, "", false
	}
	return n, secs, true
}

// Status is how an error code reaches an HTTP client: the status, the
// OpenAI error type and code, and whether Retry-After is sent.
type Status struct {
	HTTP       int
	Type       string
	Code       string
	RetryAfter bool
}

// StatusFor maps a mesh or egress error code to what an OpenAI client
// library expects (docs/openai.md has the table).
func StatusFor(code negotiate.ErrorCode) Status {
	switch code {
	case negotiate.CodeNoRoute, negotiate.CodeUnknownAgent:
		return Status{http.StatusNotFound, "invalid_request_error", "model_not_found", false}
	case CodeUnsupportedAPI:
		return Status{http.StatusNotFound, "invalid_request_error", string(code), false}
	case negotiate.CodeBadFrame, negotiate.CodeTooLarge:
		return Status{http.StatusBadRequest, "invalid_request_error", string(code), false}
	case negotiate.CodeRateLimited, negotiate.CodeTooManyRequests:
		return Status{http.StatusTooManyRequests, "rate_limit_error", string(code), true}
	case negotiate.CodeQueueFull, negotiate.CodeProviderBusy, negotiate.CodeShutdown, CodeUpstreamBusy:
		return Status{http.StatusServiceUnavailable, "server_error", string(code), true}
	case CodeUpstreamTimeout:
		return Status{http.StatusGatewayTimeout, "server_error", string(code), false}
	}
	// agent_gone, upstream_unavailable, bad_upstream_reply, bad_tag,
	// replay, a provider's own codes: the gateway's upstream failed.
	return Status{http.StatusBadGateway, "server_error", string(code), false}
}

// ErrorJSON is OpenAI's error object:
// {"error":{"message":…,"type":…,"param":null,"code":…}}.
func ErrorJSON(message, typ, code string) []byte {
	b, _ := json.Marshal(errorDoc{Error: errorObj{Message: message, Type: typ, Code: code}})
	return b
}

type errorDoc struct {
	Error errorObj `json:"error"`
}

type errorObj struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

// WriteError answers an HTTP request with OpenAI's error JSON.
func WriteError(w http.ResponseWriter, status int, message, typ, code string, retryAfter bool) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if retryAfter {
		h.Set("Retry-After", "1")
	}
	w.WriteHeader(status)
	w.Write(ErrorJSON(message, typ, code))
}
