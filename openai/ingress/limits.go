package ingress

import "time"

// Defaults of Limits. They bound what one abusive client can hold without
// refusing what real agents send: a stream may run for as long as its
// provider streams, a body of the protocol's largest size may take minutes
// to arrive, and one host may hold hundreds of connections (an agent
// framework's pool).
const (
	// DefaultIdleTimeout closes a keep-alive connection that sends no next
	// request.
	DefaultIdleTimeout = 2 * time.Minute
	// DefaultReadHeaderTimeout bounds the wait for a request's headers.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultBodyTimeout bounds the wait for each next piece of a request
	// body: a body may take as long as it needs while it keeps arriving.
	DefaultBodyTimeout = 30 * time.Second
	// DefaultWriteTimeout bounds each write to the client: a client that
	// reads nothing for this long ends its request (and the provider gets
	// CANCEL). A stream that the client reads runs as long as it lasts.
	DefaultWriteTimeout = 30 * time.Second
	// DefaultMaxConns bounds the HTTP connections open at once.
	DefaultMaxConns = 4096
	// DefaultMaxConnsPerIP bounds the connections of one client address.
	DefaultMaxConnsPerIP = 512
	// DefaultMaxBodyBytes bounds the bytes of request bodies being read
	// at once: four bodies of the largest size (16 MiB), or thousands of
	// ordinary ones.
	DefaultMaxBodyBytes = 64 << 20
)

// Limits bound what clients hold at the endpoint. The zero value of each
// field is its Default; a negative value (a duration or count below zero)
// removes the bound.
type Limits struct {
	// IdleTimeout closes keep-alive connections idle this long.
	IdleTimeout time.Duration
	// ReadHeaderTimeout bounds the wait for a request's headers.
	ReadHeaderTimeout time.Duration
	// BodyTimeout bounds the wait for each next piece of a request body.
	BodyTimeout time.Duration
	// WriteTimeout bounds each write of the answer: renewed as data
	// flows, so long streams run, but a client that stops reading ends
	// its request.
	WriteTimeout time.Duration
	// MaxConns bounds the connections open at once; one more is answered
	// 503 and closed.
	MaxConns int
	// MaxConnsPerIP bounds the connections of one client IP; one more is
	// answered 429 and closed.
	MaxConnsPerIP int
	// MaxBodyBytes bounds the request-body bytes held at once, across all
	// requests being read; a request that would go over it is answered
	// 503 with Retry-After before more of its body is read.
	MaxBodyBytes int64
}

func (l Limits) withDefaults() Limits {
	dur := func(d *time.Duration, def time.Duration) {
		switch {
		case *d == 0:
			*d = def
		case *d < 0:
			*d = 0
		}
	}
	num := func(n *int, def int) {
		switch {
		case *n == 0:
			*n = def
		case *n < 0:
			*n = 0
		}
	}
	dur(&l.IdleTimeout, DefaultIdleTimeout)
	dur(&l.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	dur(&l.BodyTimeout, DefaultBodyTimeout)
	dur(&l.WriteTimeout, DefaultWriteTimeout)
	num(&l.MaxConns, DefaultMaxConns)
	num(&l.MaxConnsPerIP, DefaultMaxConnsPerIP)
	switch {
	case l.MaxBodyBytes == 0:
		l.MaxBodyBytes = DefaultMaxBodyBytes
	case l.MaxBodyBytes < 0:
		l.MaxBodyBytes = 0
	}
	return l
}
