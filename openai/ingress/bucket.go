package ingress

import (
	"sync"
	"time"
)

// bucket is a token bucket that refunds and owes: tokens per minute are
// reserved before a request goes out and settled when its usage is known,
// which golang.org/x/time/rate cannot do (a reservation acted on cannot
// be given back). It refills at perMinute/60 a second up to perMinute;
// what is owed makes it negative, and later requests wait until it
// refills. The debt is capped at one minute's allowance: an answer whose
// usage claims more (a provider may report anything) cannot lock a key
// out for longer than that.
type bucket struct {
	mu        sync.Mutex
	perMinute float64
	tokens    float64
	at        time.Time
}

func newBucket(perMinute int, now time.Time) *bucket {
	return &bucket{perMinute: float64(perMinute), tokens: float64(perMinute), at: now}
}

func (b *bucket) refill(now time.Time) {
	if now.After(b.at) {
		b.tokens = min(b.perMinute, b.tokens+now.Sub(b.at).Minutes()*b.perMinute)
		b.at = now
	}
}

// setLimit changes the rate and size; what was used of the old size
// counts against the new one.
func (b *bucket) setLimit(perMinute int, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	used := b.perMinute - b.tokens
	b.perMinute = float64(perMinute)
	b.tokens = max(-b.perMinute, b.perMinute-used)
}

// size is the most one request may take.
func (b *bucket) size() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return int(b.perMinute)
}

// take takes n tokens, or reports how long until there are n.
func (b *bucket) take(n int, now time.Time) (time.Duration, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	if b.tokens >= float64(n) {
		b.tokens -= float64(n)
		return 0, true
	}
	missing := float64(n) - b.tokens
	// At most two minutes with the debt capped; clamped before the
	// conversion all the same, so a Retry-After is never an overflow.
	wait := min(missing/b.perMinute, maxWaitMinutes)
	return time.Duration(wait * float64(time.Minute)), false
}

// maxWaitMinutes bounds take's wait: n is at most perMinute, the debt
// perMinute.
const maxWaitMinutes = 2

// settle corrects a reservation of reserved tokens to used: a refund when
// used is less, a debt when more.
func (b *bucket) settle(reserved, used int, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	b.tokens = min(b.perMinute, max(-b.perMinute, b.tokens+float64(reserved)-float64(used)))
}
