package openai

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/m2md/m2md/negotiate"
)

func TestStatusFor(t *testing.T) {
	for _, tc := range []struct {
		code   negotiate.ErrorCode
		status int
		oaCode string
		retry  bool
	}{
		{negotiate.CodeNoRoute, 404, "model_not_found", false},
		{negotiate.CodeUnknownAgent, 404, "model_not_found", false},
		{negotiate.CodeAgentGone, 502, "agent_gone", false},
		{negotiate.CodeRateLimited, 429, "rate_limited", true},
		{negotiate.CodeTooManyRequests, 429, "too_many_requests", true},
		{negotiate.CodeQueueFull, 503, "queue_full", true},
		{negotiate.CodeProviderBusy, 503, "provider_busy", true},
		{negotiate.CodeShutdown, 503, "shutdown", true},
		{CodeUpstreamBusy, 503, "upstream_busy", true},
		{CodeUpstreamTimeout, 504, "upstream_timeout", false},
		{negotiate.CodeTooLarge, 400, "too_large", false},
		{negotiate.CodeBadFrame, 400, "bad_frame", false},
		{CodeUpstreamUnavailable, 502, "upstream_unavailable", false},
		{"something_else", 502, "something_else", false},
	} {
		s := StatusFor(tc.code)
		if s.HTTP != tc.status || s.Code != tc.oaCode || s.RetryAfter != tc.retry {
			t.Errorf("%s: %+v", tc.code, s)
		}
	}
}

func TestUpstreamHTTPCode(t *testing.T) {
	for _, st := range []int{400, 401, 429, 500, 503, 599} {
		if got, ok := UpstreamHTTPStatus(UpstreamHTTPCode(st)); !ok || got != st {
			t.Errorf("%d: %d %v", st, got, ok)
		}
	}
	for _, c := range []negotiate.ErrorCode{"upstream_http_200", "upstream_http_600", "upstream_http_4x9", "upstream_http_4000", "no_route"} {
		if _, ok := UpstreamHTTPStatus(c); ok {
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
