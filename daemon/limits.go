package daemon

import (
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/m2md/m2md/negotiate"
)

// Limit names, as they appear in m2md_limited_total and in logs.
const (
	limitSessionsPerIP    = "sessions_per_ip"
	limitNewSessionsPerIP = "new_sessions_per_ip"
	limitMessageRate      = "message_rate"
	limitByteRate         = "byte_rate"
	limitControlRate      = "control_rate"
)

// admission enforces the per-source-IP limits on connections: how many
// sessions (handshaking ones included, so idle connections that never send
// HELLO count) one address may hold, and how many it may open per minute.
type admission struct {
	maxPerIP  int // < 0: unlimited
	perMinute int // < 0: unlimited
	burst     int // opens allowed at once; at least perMinute
	// forgetAfter is how long an address with no session must stay away
	// for its whole burst to have refilled; sweep forgets it then.
	forgetAfter time.Duration

	mu    sync.Mutex
	perIP map[netip.Addr]*ipEntry
}

type ipEntry struct {
	sessions int
	opens    *rate.Limiter
	lastSeen time.Time
}

// newAdmission limits each address to maxPerIP connections at once and to
// perMinute new ones a minute after a burst of burst (raised to perMinute
// if lower).
func newAdmission(maxPerIP, perMinute, burst int) *admission {
	a := &admission{maxPerIP: maxPerIP, perMinute: perMinute, burst: max(burst, perMinute),
		forgetAfter: time.Minute, perIP: make(map[netip.Addr]*ipEntry)}
	if perMinute > 0 {
		a.forgetAfter = max(time.Minute, time.Duration(float64(a.burst)/float64(perMinute)*float64(time.Minute)))
	}
	return a
}

// admit counts a new connection from addr. It returns the limit refused
// ("" when admitted) and, when admitted, the release to call when the
// connection ends.
func (a *admission) admit(addr net.Addr, now time.Time) (release func(), limit string) {
	ip := addrIP(addr)
	a.mu.Lock()
	defer a.mu.Unlock()
	e := a.perIP[ip]
	if e == nil {
		e = &ipEntry{}
		if a.perMinute > 0 {
			// The burst may be spent at once; it refills at perMinute
			// per minute.
			e.opens = rate.NewLimiter(rate.Limit(float64(a.perMinute)/60), a.burst)
		}
		a.perIP[ip] = e
	}
	e.lastSeen = now
	if a.maxPerIP > 0 && e.sessions >= a.maxPerIP {
		return nil, limitSessionsPerIP
	}
	if e.opens != nil && !e.opens.AllowN(now, 1) {
		return nil, limitNewSessionsPerIP
	}
	e.sessions++
	var once sync.Once
	return func() {
		once.Do(func() {
			a.mu.Lock()
			e.sessions--
			a.mu.Unlock()
		})
	}, ""
}

// sweep forgets addresses with no session that have not been seen for long
// enough that their open allowance has refilled, so the table stays bounded
// by the addresses active recently.
func (a *admission) sweep(now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for ip, e := range a.perIP {
		if e.sessions == 0 && now.Sub(e.lastSeen) > a.forgetAfter {
			delete(a.perIP, ip)
		}
	}
}

func (a *admission) size() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.perIP)
}

// addrIP is the key the per-address limits count addr under: the IPv4
// address, or the /64 prefix of an IPv6 address (its first 64 bits, the
// rest zero). An IPv6 client commonly holds a whole /64 and can pick any
// address in it, so counting full addresses would let one client bypass
// every per-address limit.
func addrIP(addr net.Addr) netip.Addr {
	ip := remoteIP(addr)
	if ip.Is6() {
		p, _ := ip.WithZone("").Prefix(64)
		ip = p.Addr()
	}
	return ip
}

// remoteIP is addr's IP address, IPv4-mapped addresses as IPv4.
func remoteIP(addr net.Addr) netip.Addr {
	var ip netip.Addr
	switch a := addr.(type) {
	case *net.UDPAddr:
		ip, _ = netip.AddrFromSlice(a.IP)
	case *net.TCPAddr:
		ip, _ = netip.AddrFromSlice(a.IP)
	default:
		if ap, err := netip.ParseAddrPort(addr.String()); err == nil {
			ip = ap.Addr()
		}
	}
	return ip.Unmap()
}

// sessionRates are one session's message and byte allowances (token
// buckets: a minute's messages and a second's bytes may arrive in a burst).
type sessionRates struct {
	msgs  *rate.Limiter // nil: unlimited
	bytes *rate.Limiter
	errs  *rate.Limiter // rate_limited error replies
	// ctrl bounds control messages (PING, PONG, CLOSE) instead of the two
	// above: they keep a session alive (docs/protocol.md §3.4), and a PONG
	// or PING dropped with the DATA over a low rate would have the session
	// taken for dead by one side or the other.
	ctrl *rate.Limiter
}

func newSessionRates(msgsPerMinute, bytesPerSecond, maxMessage int) sessionRates {
	var r sessionRates
	if msgsPerMinute > 0 {
		r.msgs = rate.NewLimiter(rate.Limit(float64(msgsPerMinute)/60), msgsPerMinute)
	}
	if bytesPerSecond > 0 {
		// The burst must hold the largest message, or it could never pass.
		r.bytes = rate.NewLimiter(rate.Limit(bytesPerSecond), max(bytesPerSecond, maxMessage))
	}
	if r.msgs != nil || r.bytes != nil {
		r.errs = rate.NewLimiter(errorRepliesPerSecond, errorRepliesPerSecond)
		r.ctrl = rate.NewLimiter(controlPerSecond, 2*controlPerSecond)
	}
	return r
}

// limitFlag names a per-session limit as the operator sets it.
func limitFlag(limit string) string {
	switch limit {
	case limitMessageRate:
		return "message rate (m2md serve --messages-per-minute)"
	case limitByteRate:
		return "byte rate (m2md serve --bytes-per-second)"
	}
	return limit
}

// errorRepliesPerSecond bounds the rate_limited errors one session is sent.
const errorRepliesPerSecond = 10

// controlPerSecond bounds the control messages of a session with a
// message or byte rate (a burst of twice as many): an agent sends one PONG
// per PING and PINGs at most once a second while it waits for replies.
const controlPerSecond = 10

// allow spends the allowance for one message of kind of n bytes, or
// reports which limit it exceeds.
func (r *sessionRates) allow(now time.Time, kind negotiate.Kind, n int) string {
	if kind == negotiate.KindControl {
		if r.ctrl != nil && !r.ctrl.AllowN(now, 1) {
			return limitControlRate
		}
		return ""
	}
	if r.msgs != nil && !r.msgs.AllowN(now, 1) {
		return limitMessageRate
	}
	if r.bytes != nil && !r.bytes.AllowN(now, n) {
		return limitByteRate
	}
	return ""
}

// tell reports whether a message refused for its rate may be answered with
// an error: at most errorRepliesPerSecond a second (the same as a burst),
// so that a sender far over its rate does not get one error per message.
// The others are counted (m2md_queue_drops_total{reason="error_rate_limited"}).
func (r *sessionRates) tell(now time.Time) bool {
	return r.errs == nil || r.errs.AllowN(now, 1)
}

// logOnce reports whether an event for key should be logged now: at most
// once per window, so an abusive peer cannot flood the log.
type logOnce struct {
	window time.Duration
	mu     sync.Mutex
	last   map[string]time.Time
}

func newLogOnce(window time.Duration) *logOnce {
	return &logOnce{window: window, last: make(map[string]time.Time)}
}

func (l *logOnce) allow(key string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t, ok := l.last[key]; ok && now.Sub(t) < l.window {
		return false
	}
	if len(l.last) >= 10_000 {
		for k, t := range l.last {
			if now.Sub(t) >= l.window {
				delete(l.last, k)
			}
		}
		if len(l.last) >= 10_000 {
			return false // under a flood of distinct peers, stay quiet
		}
	}
	l.last[key] = now
	return true
}
