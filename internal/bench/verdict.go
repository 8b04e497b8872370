package bench

import (
	"errors"
	"fmt"

	"github.com/m2md/m2md/negotiate"
)

// ErrMostlyFailed is wrapped by Check's error: at least as many requests of
// a run failed as completed, so its figures describe the failure, not the
// daemon.
var ErrMostlyFailed = errors.New("bench: most requests failed")

// The generator's own failure reasons for requests cut short by their
// connection.
const (
	reasonConnectionLost = "connection_lost" // the connection failed
	reasonSessionClosed  = "session_closed"  // the daemon sent CLOSE
)

// likelyCause says, per error reason, what usually produces it and which
// setting changes it. Reasons are the daemon's error codes
// (docs/protocol.md §4) and the generator's own.
var likelyCause = map[string]string{
	string(negotiate.CodeRateLimited):     "the daemon's per-session limits refused them: raise its --messages-per-minute and --bytes-per-second (0: unlimited)",
	string(negotiate.CodeNoRoute):         "no provider serves the model: run providers against the same daemon (--providers), or check the payload's model",
	string(negotiate.CodeUnknownAgent):    "the addressed provider is not connected",
	string(negotiate.CodeProviderBusy):    "the providers have as many requests in flight as they accept: add --providers, or lower --concurrency / --rate",
	string(negotiate.CodeTooManyRequests): "more requests in flight per connection than the daemon's --max-outstanding: add --connections or lower --concurrency",
	string(negotiate.CodeQueueFull):       "a session's send queue (the daemon's --send-queue) was full: the receiving side is not reading fast enough",
	string(negotiate.CodeTooLarge):        "the payload is larger than the daemon's --max-payload",
	"timeout":                             "replies took longer than --timeout: the target is overloaded; lower --rate or --concurrency",
	reasonConnectionLost:                  "connections to the target dropped: see the daemon's log (a limit such as --max-sessions-per-ip, or a restart)",
	reasonSessionClosed:                   "the daemon closed the sessions (CLOSE ERROR): most often a session that kept sending over its rate after rate_limited errors; raise the daemon's --messages-per-minute and --bytes-per-second (0: unlimited), or see its log",
	"generator_in_flight_limit":           "the target did not keep up with --rate: --max-in-flight requests were waiting; lower --rate",
	"no_channel":                          "no QUIC stream could be opened: the daemon's stream limit is reached; lower --concurrency",
	"unanswered_at_end":                   "requests were still unanswered when the run ended: the target is overloaded",
}

// Check returns an error wrapping ErrMostlyFailed when, in any run of the
// report, failed requests are at least as many as completed round trips, or
// none completed at all. It names the most frequent reason and its likely
// cause.
func (r *LoadReport) Check() error {
	for _, res := range []*Result{&r.Result, r.Baseline, r.NATS, r.Echo} {
		if res == nil {
			continue
		}
		if res.RoundTrips == 0 && res.Errors == 0 {
			if reason, n := mostFrequent(res.WarmupErrorsByReason); n > 0 {
				return fmt.Errorf("%w: %s run: no request completed in the measured time; %d failed during the warm-up, most (%d) with %s: %s",
					ErrMostlyFailed, res.Run, res.WarmupErrors, n, reason, causeOf(reason))
			}
			return fmt.Errorf("%w: %s run: no request completed in the measured time (%d failed during the warm-up): the target accepted none; see its log",
				ErrMostlyFailed, res.Run, res.WarmupErrors)
		}
		if res.Errors == 0 || res.Errors < res.RoundTrips {
			continue
		}
		reason, n := mostFrequent(res.ErrorsByReason)
		cause := causeOf(reason)
		return fmt.Errorf("%w: %s run: %d requests failed, %d completed; most (%d) with %s: %s",
			ErrMostlyFailed, res.Run, res.Errors, res.RoundTrips, n, reason, cause)
	}
	return nil
}

// mostFrequent returns the reason with the most failures (the first in
// sorted order on a tie) and its count.
func mostFrequent(byReason map[string]int64) (reason string, n int64) {
	for _, k := range sortedKeys(byReason) {
		if v := byReason[k]; v > n {
			reason, n = k, v
		}
	}
	return reason, n
}

// causeOf is the likely cause of a failure reason, for the user.
func causeOf(reason string) string {
	if cause := likelyCause[reason]; cause != "" {
		return cause
	}
	return "see the errors row of the table"
}
