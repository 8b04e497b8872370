package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Sequence numbers: what NATS dropped is answered, not silent.
//
// NATS delivers what one connection publishes to one subscriber in order,
// but a subscriber that falls behind by more than its pending limit (here:
// the inbox, Config.Inbox + Config.Headroom messages; inbox.go) loses
// messages, and the publisher is not told. So every data message (every kind but
// control) a node publishes to another carries a sequence number, one
// series per destination, from 1. The receiver expects them consecutive;
// a jump is a gap, and the receiver tells the sender (lost: First..Last).
// The heartbeat says what the last number sent to each node was, so a lost
// tail is seen within a heartbeat too.
//
// Every series starts at 1, but the receiver may first hear a later number
// (NATS dropped the first ones: a node that falls behind as another joins),
// and cannot tell that from a series it did not hear begin (it restarted
// under the same id, and the sender does not know yet): so it takes the
// series from there, and asks the sender for its snapshot. A snapshot says
// the last number its sender published to the node it is for before it,
// in publish order with the data, so it settles the series: what the
// receiver heard was of the same series, and the numbers before the first
// it heard were lost, or of an older one, and all of the snapshot's series
// was lost (settle). A node gets every other node's snapshot as it joins,
// so losses right after a join are reported like any other.
//
// The sender keeps, per destination, a ring of what it sent (sent: the
// request id, and for a reply the provider it came from), as many entries
// as the receiver's inbox channel holds. For each lost number still in the
// ring it answers as if the message had been refused on arrival: a request
// is ended for its requester (Lost, LostRequest); a reply's provider is
// told and the requester's node gets an error in its place (LostReply); a
// cancel, notice or lost is sent again. Numbers no longer in the ring (more
// than the ring's size were sent before the loss was reported: sustained
// overload) cannot be named: the sender ends every request it has pending
// at that node, and says forgot First..Last so that the receiver does the
// same with every request it has pending at the sender (LostAll on both).
// That is coarse, and rare: it costs errors, never a hang.
//
// A lost chunk of a stream is also seen at once by the requester's node:
// every reply says its place among its request's replies (Reply.N), so
// the chunk after a lost one is out of place, and the daemon ends the
// request there rather than deliver an answer with a hole.

// LostKind says what a Lost is about.
type LostKind uint8

// Lost kinds.
const (
	// LostRequest: request W sent to Node never arrived. End it for its
	// requester with an error.
	LostRequest LostKind = iota + 1
	// LostReply: the reply to request W sent to Node never arrived. Tell
	// its provider (Ref, Delivery, Channel as given in Reply) and send
	// Node an error reply in its place, ending the request there.
	LostReply
	// LostAll: messages between this node and Node were lost and cannot
	// be named. End every request this node has pending at Node with an
	// error (and cancel it there).
	LostAll
	// LostVoid: Node stopped hearing this node and declared it dead, so
	// it dropped the requests it was serving for this node. End every
	// request this node has pending at Node with an error.
	LostVoid
)

// Lost is a data message that did not reach its destination (Handler.Lost).
type Lost struct {
	Kind LostKind
	Node string // the node the message was for (LostAll: the other node)
	W    uint64
	// LostReply: what the reply's sender gave in Reply.Ref, Delivery,
	// Channel, and whether it was the request's final reply.
	Ref               any
	Delivery, Channel uint64
	End               bool
}

// sent is what a node remembers of a data message it published.
type sent struct {
	seq  uint64
	w    uint64 // request id; lost, forgot: first
	aux  uint64 // reply: delivery; notice: about; lost, forgot: last
	aux2 uint64 // reply: channel
	ref  any    // reply: Reply.Ref; notice: its code
	kind byte
	end  bool
}

// dest is this node's sending side towards one other node.
type dest struct {
	subj string
	mu   sync.Mutex // seq and ring; held while publishing, so seq order is publish order
	seq  uint64     // the last number published
	ring []sent     // allocated on the first data message
	gone bool       // the node was declared dead: a new dest replaces this one
	// voided is the last number published before the node said it had
	// declared this one dead (void): it dropped what it had of this
	// node then, and this node ended its requests there, so reports of
	// those numbers are moot.
	voided uint64
}

// series is what a node knows of the numbers another node sends it.
type series struct {
	next uint64 // the number expected next
	// first is the first number heard of a series that did not start at
	// 1, until the sender's snapshot settles it (0 once settled).
	first uint64
}

// ringSize is how many sent messages a node remembers per destination:
// what the destination can hold before its dispatcher reaches them (its
// inbox, and what NATS hands its receive goroutine: inbox.go).
func ringSize(cfg *Config) int { return inboxCap(cfg) + arriveCap }

// dest returns the sending side towards node.
func (c *Cluster) dest(node string) *dest {
	if d, ok := c.dests.Load(node); ok {
		return d.(*dest)
	}
	node = strings.Clone(node) // it may alias a message
	d, _ := c.dests.LoadOrStore(node, &dest{subj: c.prefix + "n." + node})
	return d.(*dest)
}

// lockDest returns the sending side towards node, locked.
func (c *Cluster) lockDest(node string) *dest {
	d := c.dest(node)
	d.mu.Lock()
	for d.gone { // replaced while this sender held it
		d.mu.Unlock()
		d = c.dest(node)
		d.mu.Lock()
	}
	return d
}

// ErrUnknownNode is returned for a message to a node this node has no
// authenticated identity of (it never heard it, or forgot it): there is no
// key to seal the message with.
var ErrUnknownNode = errors.New("cluster: no authenticated identity of that node (not heard from it)")

// publishData numbers b (an encoded data message, seq at b[1:9]) for node,
// seals it (auth.go), publishes it and remembers e under its number.
func (c *Cluster) publishData(node string, b []byte, e sent) error {
	m := c.member(node)
	if m == nil {
		c.stats.SendFailed.Add(1)
		return fmt.Errorf("%w: %s", ErrUnknownNode, node)
	}
	d := c.lockDest(node)
	defer d.mu.Unlock()
	seq := d.seq + 1
	binary.BigEndian.PutUint64(b[1:9], seq)
	sp := c.bufs.Get().(*[]byte)
	sb := c.seal((*sp)[:0], m, b)
	err := c.publish(d.subj, sb)
	*sp = sb[:0]
	c.bufs.Put(sp)
	if err != nil {
		return err // the number is not used: no gap (the nonce is, never to be used again)
	}
	d.seq = seq
	if d.ring == nil {
		d.ring = make([]sent, c.ringSize)
	}
	e.seq = seq
	d.ring[seq%uint64(len(d.ring))] = e
	return nil
}

// lastSent returns the last number published to each node (heartbeats).
func (c *Cluster) lastSent() map[string]uint64 {
	var m map[string]uint64
	c.dests.Range(func(k, v any) bool {
		d := v.(*dest)
		d.mu.Lock()
		if d.seq > 0 {
			if m == nil {
				m = make(map[string]uint64)
			}
			m[k.(string)] = d.seq
		}
		d.mu.Unlock()
		return true
	})
	return m
}

// sequence checks the number of a data message from node (dispatcher
// only): a jump reports the gap to node. The first number heard from a
// node starts the series, as does a number below the expected one (node
// restarted under the same id, or declared this one dead): when it is not
// 1, the node is asked for its snapshot, which tells what came before
// (settle).
func (c *Cluster) sequence(node string, seq uint64) {
	s, ok := c.rx[node]
	switch {
	case ok && seq >= s.next:
		if seq > s.next {
			c.gap(node, s.next, seq-1)
		}
	case seq == 1:
		s.first = 0
	default:
		s.first = seq
		if p := c.peers[node]; p != nil && !p.syncing {
			c.askSnapshot(node, p, time.Now())
		}
	}
	if !ok {
		node = strings.Clone(node)
	}
	s.next = seq + 1
	c.rx[node] = s
}

// sentTo notes a heartbeat's word that node's last data message to this
// node was seq (dispatcher only).
func (c *Cluster) sentTo(node string, seq uint64) {
	s, ok := c.rx[node]
	if !ok || s.first != 0 || seq < s.next {
		return // the series is not settled, or the word is of another
	}
	c.gap(node, s.next, seq)
	c.rx[node] = series{next: seq + 1}
}

// settle notes node's snapshot's word that its last data message to this
// node before the snapshot was seq (dispatcher only). Everything node
// published before the snapshot arrived before it, or was lost.
func (c *Cluster) settle(node string, seq uint64) {
	s, ok := c.rx[node]
	switch {
	case !ok || seq+1 < s.next:
		// Nothing heard of this series (new, or what was heard is of an
		// older one): all of it was lost.
		if seq > 0 {
			c.gap(node, 1, seq)
		}
	default:
		if s.first > 1 {
			c.gap(node, 1, s.first-1) // its start was lost
		}
		if seq >= s.next {
			c.gap(node, s.next, seq) // its tail was lost
		}
	}
	if !ok {
		node = strings.Clone(node)
	}
	c.rx[node] = series{next: seq + 1}
}

// gap tells node that its messages first..last did not arrive.
func (c *Cluster) gap(node string, first, last uint64) {
	c.stats.SlowConsumer.Add(last - first + 1)
	// At most one line a second: under sustained overload gaps come by
	// the thousand, and the counter has them all.
	if now := time.Now(); now.Sub(c.gapLogged) >= time.Second {
		c.gapLogged = now
		c.log.Warn().Str("peer", node).Uint64("first", first).Uint64("last", last).Uint64("lost_total", c.stats.SlowConsumer.Load()).
			Msg("cluster messages lost (slow consumer): asking the sender to answer them")
	}
	c.sendGap(kindLost, node, first, last)
}

func (c *Cluster) sendGap(kind byte, node string, first, last uint64) {
	b, err := appendGap(nil, &gapMsg{Kind: kind, First: first, Last: last, From: c.cfg.Node})
	if err == nil {
		err = c.publishData(node, b, sent{kind: kind, w: first, aux: last})
	}
	if err != nil {
		c.log.Warn().Err(err).Str("peer", node).Msg("lost messages could not be reported")
	}
}

// answerLost answers node's report that this node's messages first..last
// to it never arrived (dispatcher only).
func (c *Cluster) answerLost(node string, first, last uint64) {
	d := c.dest(node)
	d.mu.Lock()
	if last > d.seq {
		last = d.seq // never sent: a confused or restarted peer
	}
	first = max(first, d.voided+1)
	var named []sent
	var unnamed uint64
	if n := uint64(len(d.ring)); n > 0 && first <= last {
		if last-first >= n { // the oldest were overwritten for sure
			unnamed = last - first + 1 - n
			first = last - n + 1
		}
		for seq := first; seq <= last; seq++ {
			if e := d.ring[seq%n]; e.seq == seq {
				named = append(named, e)
			} else {
				unnamed++
			}
		}
	}
	d.mu.Unlock()
	c.stats.LostAnswered.Add(uint64(len(named)))
	for i := range named {
		e := &named[i]
		switch e.kind {
		case kindRequest:
			c.h.Lost(&Lost{Kind: LostRequest, Node: node, W: e.w})
		case kindReply:
			c.h.Lost(&Lost{Kind: LostReply, Node: node, W: e.w, Ref: e.ref, Delivery: e.aux, Channel: e.aux2, End: e.end})
		case kindCancel:
			_ = c.SendCancel(node, e.w)
		case kindNotice:
			code, _ := e.ref.(string)
			_ = c.SendNotice(node, &Notice{W: e.w, About: e.aux, Code: code, Message: "a reply to this request was not delivered"})
		case kindLost, kindForgot, kindVoid:
			c.sendGap(e.kind, node, e.w, e.aux)
		}
	}
	if unnamed > 0 {
		c.stats.LostUnnamed.Add(unnamed)
		c.log.Warn().Str("peer", node).Uint64("messages", unnamed).Msg("lost cluster messages no longer remembered: ending every request between the two nodes")
		c.sendGap(kindForgot, node, first, last)
		c.h.Lost(&Lost{Kind: LostAll, Node: node})
	}
}

// noteAbout fills in what this node remembers of the reply a notice from
// node is about (dispatcher only).
func (c *Cluster) noteAbout(node string, n *Notice) {
	if n.About == 0 {
		return
	}
	d := c.dest(node)
	d.mu.Lock()
	if d.ring != nil {
		if e := d.ring[n.About%uint64(len(d.ring))]; e.seq == n.About && e.kind == kindReply && e.w == n.W {
			n.Ref, n.Delivery, n.Channel, n.End = e.ref, e.aux, e.aux2, e.end
		}
	}
	d.mu.Unlock()
}

// voided notes that node declared this one dead (dispatcher only).
func (c *Cluster) voided(node string) {
	d := c.lockDest(node)
	d.voided = d.seq
	d.mu.Unlock()
}
