package openai

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/m2md/m2md/negotiate"
)

func TestStatusFor(t *testing.T) {
	// The types are OpenAI's (what its client libraries branch on), written
	// out here rather than taken from the code under test.
	const (
		invalid   = "invalid_request_error"
		rateLimit = "rate_limit_error"
		server    = "server_error"
	)
	for _, tc := range []struct {
		code   negotiate.ErrorCode
		status int
		typ    string
		oaCode string
		retry  bool
	}{
		{negotiate.CodeNoRoute, 404, invalid, "model_not_found", false},
		{negotiate.CodeUnknownAgent, 404, invalid, "model_not_found", false},
		{negotiate.CodeAgentGone, 502, server, "agent_gone", false},
		{negotiate.CodeRateLimited, 429, rateLimit, "rate_limited", true},
		{negotiate.CodeTooManyRequests, 429, rateLimit, "too_many_requests", true},
		{negotiate.CodeQueueFull, 503, server, "queue_full", true},
		{negotiate.CodeProviderBusy, 503, server, "provider_busy", true},
		{negotiate.CodeShutdown, 503, server, "shutdown", true},
		{CodeUpstreamBusy, 503, server, "upstream_busy", true},
		{CodeUpstreamTimeout, 504, server, "upstream_timeout", false},
		{negotiate.CodeTooLarge, 400, invalid, "too_large", false},
		{negotiate.CodeBadFrame, 400, invalid, "bad_frame", false},
		{CodeUpstreamUnavailable, 502, server, "upstream_unavailable", false},
		{CodeBadUpstreamReply, 502, server, "bad_upstream_reply", false},
		{"something_else", 502, server, "something_else", false},
	} {
		want := Status{HTTP: tc.status, Type: tc.typ, Code: tc.oaCode, RetryAfter: tc.retry}
		if s := StatusFor(tc.code); s != want {
			t.Errorf("%s: %+v, want %+v", tc.code, s, want)
		}
	}
}

func TestUpstreamHTTPCode(t *testing.T) {
	for _, st := range []int{400, 401, 429, 500, 503, 599} {
		if got, ra, ok := UpstreamHTTPStatus(UpstreamHTTPCode(st, "")); !ok || got != st || ra != "" {
			t.Errorf("%d: %d %q %v", st, got, ra, ok)
		}
	}
	future := time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)
	for _, tc := range []struct {
		header, code, want string
	}{
		{"30", "upstream_http_429_retry_after_30", "30"},
		{" 0 ", "upstream_http_429_retry_after_0", "0"},
		{"99999999999", "upstream_http_429_retry_after_16777216", "16777216"},
		{"Wed, 21 Oct 2015 07:28:00 GMT", "upstream_http_429_retry_after_0", "0"}, // a date past
		{"-5", "upstream_http_429", ""},
		{"soon", "upstream_http_429", ""},
	} {
		code := UpstreamHTTPCode(429, tc.header)
		if string(code) != tc.code {
			t.Errorf("Retry-After %q: code %s, want %s", tc.header, code, tc.code)
		}
		if st, ra, ok := UpstreamHTTPStatus(code); !ok || st != 429 || ra != tc.want {
			t.Errorf("%s: %d %q %v", code, st, ra, ok)
		}
	}
	// An HTTP date 90 s ahead: 89-90 s, whatever the clock did meanwhile.
	if _, ra, _ := UpstreamHTTPStatus(UpstreamHTTPCode(503, future)); ra != "90" && ra != "89" {
		t.Errorf("date 90 s ahead: Retry-After %q", ra)
	}
	for _, c := range []negotiate.ErrorCode{"upstream_http_200", "upstream_http_600", "upstream_http_4x9", "upstream_http_4000", "no_route",
		"upstream_http_+42", "upstream_http_429_retry_after_", "upstream_http_429_retry_after_1x", "upstream_http_429_retry_after_123456789", "upstream_http_429_other"} {
		if _, _, ok := UpstreamHTTPStatus(c); ok {
			t.Errorf("%s accepted", c)
		}
	}
}

func TestErrorJSON(t *testing.T) {
	var doc struct {
		Error struct {
			Message, Type, Code string
			Param               *string
		}
	}
	b := ErrorJSON("quote \" and <tag>", "invalid_request_error", "x")
	if err := json.Unmarshal(b, &doc); err != nil || doc.Error.Message != "quote \" and <tag>" || doc.Error.Param != nil || doc.Error.Code != "x" {
		t.Fatalf("%s: %+v %v", b, doc, err)
	}
	_ = http.StatusOK
}
