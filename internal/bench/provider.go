package bench

import (
	"context"
	"sync"
	"time"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/negotiate"
	"github.com/m2md/m2md/security"
	"github.com/m2md/m2md/transport"
)

// counters counts events by name, safe for concurrent use.
type counters struct {
	mu sync.Mutex
	m  map[string]int64
}

func (c *counters) add(name string) {
	c.mu.Lock()
	if c.m == nil {
		c.m = make(map[string]int64)
	}
	c.m[name]++
	c.mu.Unlock()
}

func (c *counters) snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(c.m))
	for k, v := range c.m {
		out[k] = v
	}
	return out
}

// bufPool hands out byte buffers of at least size bytes of capacity.
type bufPool struct {
	size int
	p    sync.Pool
}

func (b *bufPool) get() *[]byte {
	if v := b.p.Get(); v != nil {
		return v.(*[]byte)
	}
	buf := make([]byte, 0, b.size)
	return &buf
}

func (b *bufPool) put(p *[]byte) {
	if cap(*p) >= b.size {
		*p = (*p)[:0]
		b.p.Put(p)
	}
}

// m2mProvider is an echo responder: an agent serving the run's models that
// answers every request with its own frame, after the service time.
type m2mProvider struct {
	s           *m2mSession
	serviceTime time.Duration
	errs        *counters
	bufs        bufPool
	served      sync.WaitGroup // replies waiting for their service time
	done        chan struct{}
}

func newM2MProvider(s *m2mSession, serviceTime time.Duration, maxFrame int, errs *counters) *m2mProvider {
	return &m2mProvider{
		s:           s,
		serviceTime: serviceTime,
		errs:        errs,
		bufs:        bufPool{size: negotiate.MaxDataHeaderLen + maxFrame + security.MaxOverhead},
		done:        make(chan struct{}),
	}
}

func (p *m2mProvider) run() {
	defer close(p.done)
	_ = receiveBatches(context.Background(), p.s.conn, func(msg transport.Message) error {
		defer msg.Release()
		return p.handle(&msg)
	})
}

func (p *m2mProvider) handle(msg *transport.Message) error {
	kind, err := negotiate.MessageKind(msg.Data)
	if err != nil {
		return err
	}
	if kind == negotiate.KindControl {
		return p.s.control(msg.Data)
	}
	dh, fr, err := negotiate.ParseData(msg.Data)
	if err != nil {
		return err
	}
	if dh.IsReply() {
		// A notice about one of this provider's replies.
		code := "notice"
		if plain, reason := p.s.open(fr, msg.Channel); reason == "" && len(plain) > 0 && plain[0] == '#' {
			code = errorCode(plain)
		}
		p.errs.add("provider_notice_" + code)
		return nil
	}
	tokenNative := len(fr) > 0 && fr[0] != '#'
	if !tokenNative {
		plain, reason := p.s.open(fr, msg.Channel)
		if reason != "" {
			p.errs.add("provider_" + reason)
			p.replyError(msg.Channel, dh.RequestID, reason)
			return nil
		}
		fr = plain
	}
	bp := p.bufs.get()
	b, err := negotiate.AppendDataHeader((*bp)[:0], negotiate.FlagReply|negotiate.FlagEnd, dh.RequestID, "")
	if err != nil {
		return err
	}
	off := len(b)
	*bp = append(b, fr...)
	ch := msg.Channel
	if p.serviceTime <= 0 {
		p.send(ch, bp, off, tokenNative)
		return nil
	}
	p.served.Add(1)
	time.AfterFunc(p.serviceTime, func() {
		defer p.served.Done()
		p.send(ch, bp, off, tokenNative)
	})
	return nil
}

func (p *m2mProvider) send(ch transport.ChannelID, bp *[]byte, off int, tokenNative bool) {
	defer p.bufs.put(bp)
	if p.s.shared {
		p.s.sendMu.Lock()
		defer p.s.sendMu.Unlock()
	}
	b := *bp
	if !tokenNative {
		var err error
		if b, err = p.s.protect(b, off, ch); err != nil {
			p.errs.add("provider_protect_failed")
			return
		}
	}
	if err := p.s.conn.Send(context.Background(), ch, b); err != nil {
		p.errs.add("provider_send_failed")
	}
}

// replyError answers a request the provider could not open, so the
// requester learns why at once instead of timing out.
func (p *m2mProvider) replyError(ch transport.ChannelID, id uint64, code string) {
	fr, err := frame.AppendErrorFrame(nil, code, "bench provider could not open the request")
	if err != nil {
		return
	}
	bp := p.bufs.get()
	b, err := negotiate.AppendDataHeader((*bp)[:0], negotiate.FlagReply|negotiate.FlagEnd, id, "")
	if err != nil {
		return
	}
	off := len(b)
	*bp = append(b, fr...)
	p.send(ch, bp, off, false)
}

// stop closes the session and waits for the provider to finish.
func (p *m2mProvider) stop() {
	p.served.Wait()
	p.s.close()
	<-p.done
}

// tagProvider is the bare relay's echo responder: it sends every message
// back as it came, on the channel it came on.
type tagProvider struct {
	conn        transport.Conn
	serviceTime time.Duration
	errs        *counters
	bufs        bufPool
	served      sync.WaitGroup
	done        chan struct{}
}

func (p *tagProvider) run() {
	defer close(p.done)
	_ = receiveBatches(context.Background(), p.conn, p.handle)
}

func (p *tagProvider) handle(msg transport.Message) error {
	if p.serviceTime <= 0 {
		if err := p.conn.Send(context.Background(), msg.Channel, msg.Data); err != nil {
			p.errs.add("provider_send_failed")
		}
		msg.Release()
		return nil
	}
	bp := p.bufs.get()
	*bp = append((*bp)[:0], msg.Data...)
	ch := msg.Channel
	msg.Release()
	p.served.Add(1)
	time.AfterFunc(p.serviceTime, func() {
		defer p.served.Done()
		defer p.bufs.put(bp)
		if err := p.conn.Send(context.Background(), ch, *bp); err != nil {
			p.errs.add("provider_send_failed")
		}
	})
	return nil
}

func (p *tagProvider) stop() {
	p.served.Wait()
	p.conn.Close()
	<-p.done
}
