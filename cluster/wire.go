package cluster

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"unsafe"

	"github.com/m2md/m2md/negotiate"
)

// Messages on the cluster's subjects. Every message is authenticated by the
// node that sent it (auth.go): a control message is signed, a data message
// (every kind but control) is sealed under the key of its pair of nodes and
// crosses NATS only so:
//
//	control: 0x03 | sig len u16 | sig | JSON (ctlMsg, signed)
//	sealed:  0x09 | nonce u64 | len u8 | from node | ChaCha20-Poly1305(data message) (auth.go)
//
// The data messages inside a seal:
//
//	request: 0x01 | seq u64 | w u64 | algo u8 | len u8 | from node | len u8 | org | len u8 | requester | len u8 | target | [trace] | frame
//	reply:   0x02 | seq u64 | w u64 | n u32 | flags u8 | algo u8 | len u8 | from node | len u8 | provider | frame
//	cancel:  0x04 | seq u64 | w u64 | len u8 | from node
//	notice:  0x05 | seq u64 | w u64 | about u64 | len u8 | from node | len u8 | code | message
//	lost:    0x06 | seq u64 | first u64 | last u64 | len u8 | from node
//	forgot:  0x07 | seq u64 | first u64 | last u64 | len u8 | from node
//	void:    0x08 | seq u64 | 0 u64 | 0 u64 | len u8 | from node
//
// The frame is the one the sending daemon verified, without its session's
// protection: the seal is what protects it between nodes, and the
// delivering node protects it again for its session. from must be the
// node of the seal. A traced request sets bit 7 (0x80) of its algo byte and
// carries, after target, the trace block of docs/protocol.md §4.8 (26 to
// 281 bytes): the sending node's span, the parent of the delivering
// node's.
//
// w is the requesting node's id for the request (see Handler). n is a
// reply's place among the request's replies, from 0 (Unnumbered for an
// error the provider's node made itself): the requester's node sees a
// lost chunk at the next one. seq numbers
// the data messages one node publishes to another,
// from 1, so that the receiver sees what NATS dropped (seq.go). A control
// message's JSON carries "sent": in a heartbeat, the last seq the sender
// published to each node; in a snapshot, the last seq it published to the
// node the snapshot is for, before it, so that a node that joins learns how
// many messages came before the first it heard (0 or absent: none). A
// shed request or reply is kept without its frame but for the first byte
// while it waits (inbox.go); that is not on the wire. Integers are
// big-endian. Strings are 1 to 255 bytes, except org, which is empty for
// the open namespace of daemons without org secrets.
const (
	kindRequest = 0x01
	kindReply   = 0x02
	kindControl = 0x03
	kindCancel  = 0x04
	kindNotice  = 0x05
	kindLost    = 0x06
	kindForgot  = 0x07
	kindVoid    = 0x08

	flagEnd = 0x01

	// algoTrace, in a request's algo byte: a trace block follows target.
	algoTrace = 0x80
)

// Unnumbered is Reply.N of an error the provider's node made itself (the
// provider left, the request was refused or lost): always a final reply,
// taken whatever came before it.
const Unnumbered = ^uint32(0)

// ErrMalformed is returned for a cluster message that cannot be decoded.
var ErrMalformed = errors.New("cluster: malformed message")

// Request is a request crossing to the node of its provider.
type Request struct {
	Seq       uint64 // set by the sending Cluster (seq.go)
	From      string // the requesting node
	W         uint64 // the requesting node's id for it; echoed in replies
	Org       string // the requester's org: the provider is looked up there
	Requester string // the requesting agent's id (the provider sees it as peer)
	Target    string // the provider's agent id
	Algo      int8   // 0 M2M frame, 1 TokenNative (as the daemon's DATA path)
	// Trace is the request's trace block (docs/protocol.md §4.8), nil if
	// not traced; valid only during the Handler call.
	Trace []byte
	Frame []byte // valid only during the Handler call
	// Shed (not on the wire): the request found Config.Inbox messages or
	// Config.InboxBytes bytes waiting in the node's inbox, so the Handler
	// answers it with an error instead of delivering it. Frame is nil:
	// it was let go on arrival (inbox.go).
	Shed bool
	// Stranger (not on the wire): this node does not count From as a
	// member (it never heard it, or declared it dead while From still
	// hears this node). The Handler answers with an error, keeping no
	// state for From: its requester must not wait for nothing.
	Stranger bool
}

// Reply is a provider's reply (or an error) crossing back to the requester's
// node.
type Reply struct {
	Seq      uint64 // set by the sending Cluster (seq.go)
	From     string // the provider's node
	W        uint64
	N        uint32 // its place among the request's replies, or Unnumbered
	End      bool
	Provider string // the provider's agent id (the requester sees it as peer)
	Algo     int8
	Frame    []byte // valid only during the Handler call
	// Shed (not on the wire): as Request.Shed (Frame is nil); the
	// Handler ends the requester's request with an error instead of
	// delivering the reply.
	Shed bool
	// Ref, Delivery and Channel (not on the wire) are the sender's note
	// of who sent the reply (the provider's session, its delivery id and
	// channel), kept with the message's sequence number and handed back
	// in a Lost or a Notice about it: that provider is the one to tell.
	Ref               any
	Delivery, Channel uint64
}

func appendStr(b []byte, s string) ([]byte, error) {
	if len(s) == 0 || len(s) > 255 {
		return b, fmt.Errorf("cluster: string of %d bytes, want 1 to 255", len(s))
	}
	b = append(b, byte(len(s)))
	return append(b, s...), nil
}

func appendOptStr(b []byte, s string) ([]byte, error) {
	if s == "" {
		return append(b, 0), nil
	}
	return appendStr(b, s)
}

func readOptStr(b []byte) (string, []byte, error) {
	if len(b) >= 1 && b[0] == 0 {
		return "", b[1:], nil
	}
	return readStr(b)
}

// readStr reads a length-prefixed string. It aliases b rather than copy
// it (node and agent ids are six allocations a round trip otherwise): b
// must never be written afterwards, which holds for a NATS message's data,
// a copy of its own that nobody writes to.
func readStr(b []byte) (string, []byte, error) {
	if len(b) < 1 || int(b[0]) == 0 || len(b) < 1+int(b[0]) {
		return "", nil, ErrMalformed
	}
	n := int(b[0])
	return unsafe.String(&b[1], n), b[1+n:], nil
}

func appendRequest(b []byte, r *Request) ([]byte, error) {
	b = append(b, kindRequest)
	b = binary.BigEndian.AppendUint64(b, r.Seq)
	b = binary.BigEndian.AppendUint64(b, r.W)
	algo := byte(r.Algo)
	if len(r.Trace) > 0 {
		if _, err := negotiate.ParseTrace(r.Trace); err != nil {
			return b, fmt.Errorf("cluster: %w", err)
		}
		algo |= algoTrace
	}
	b = append(b, algo)
	b, err := appendStr(b, r.From)
	if err != nil {
		return b, err
	}
	if b, err = appendOptStr(b, r.Org); err != nil {
		return b, err
	}
	for _, s := range [...]string{r.Requester, r.Target} {
		if b, err = appendStr(b, s); err != nil {
			return b, err
		}
	}
	b = append(b, r.Trace...)
	return append(b, r.Frame...), nil
}

func appendReply(b []byte, r *Reply) ([]byte, error) {
	b = append(b, kindReply)
	b = binary.BigEndian.AppendUint64(b, r.Seq)
	b = binary.BigEndian.AppendUint64(b, r.W)
	b = binary.BigEndian.AppendUint32(b, r.N)
	var flags byte
	if r.End {
		flags |= flagEnd
	}
	b = append(b, flags, byte(r.Algo))
	var err error
	for _, s := range [...]string{r.From, r.Provider} {
		if b, err = appendStr(b, s); err != nil {
			return b, err
		}
	}
	return append(b, r.Frame...), nil
}

// Notice tells a provider's node that a reply to request W could not be
// delivered to the requester on the sending node (the requester got an
// error instead): the provider gets a NOTICE and its later replies are
// dropped, as for a requester on its own node.
type Notice struct {
	Seq     uint64 // set by the sending Cluster (seq.go)
	From    string // the requesting node
	W       uint64 // its id for the request
	About   uint64 // the seq of the reply refused; 0 if none
	Code    string // the wire error code (negotiate.ErrorCode)
	Message string
	// Ref, Delivery, Channel and End (not on the wire): what this node
	// noted of the reply About when it sent it (Reply.Ref), if it still
	// has it; Ref is nil otherwise. A final reply's delivery is over on
	// this node, so its provider is found here.
	Ref               any
	Delivery, Channel uint64
	End               bool
}

func appendNotice(b []byte, n *Notice) ([]byte, error) {
	b = append(b, kindNotice)
	b = binary.BigEndian.AppendUint64(b, n.Seq)
	b = binary.BigEndian.AppendUint64(b, n.W)
	b = binary.BigEndian.AppendUint64(b, n.About)
	var err error
	for _, s := range [...]string{n.From, n.Code} {
		if b, err = appendStr(b, s); err != nil {
			return b, err
		}
	}
	return append(b, n.Message...), nil
}

func decodeNotice(b []byte, n *Notice) error {
	if len(b) < 26 || b[0] != kindNotice {
		return ErrMalformed
	}
	*n = Notice{Seq: binary.BigEndian.Uint64(b[1:9]), W: binary.BigEndian.Uint64(b[9:17]), About: binary.BigEndian.Uint64(b[17:25])}
	var err error
	rest := b[25:]
	if n.From, rest, err = readStr(rest); err != nil || n.W == 0 || n.Seq == 0 {
		return ErrMalformed
	}
	if n.Code, rest, err = readStr(rest); err != nil {
		return err
	}
	n.Message = string(rest)
	return nil
}

// Cancel is a requester's CANCEL of a request another node is serving.
type Cancel struct {
	Seq  uint64 // set by the sending Cluster (seq.go)
	From string // the requesting node
	W    uint64 // its id for the request
}

func appendCancel(b []byte, c *Cancel) ([]byte, error) {
	b = append(b, kindCancel)
	b = binary.BigEndian.AppendUint64(b, c.Seq)
	b = binary.BigEndian.AppendUint64(b, c.W)
	return appendStr(b, c.From)
}

func decodeCancel(b []byte, c *Cancel) error {
	if len(b) < 18 || b[0] != kindCancel {
		return ErrMalformed
	}
	c.Seq = binary.BigEndian.Uint64(b[1:9])
	c.W = binary.BigEndian.Uint64(b[9:17])
	var rest []byte
	var err error
	if c.From, rest, err = readStr(b[17:]); err != nil || len(rest) != 0 || c.W == 0 || c.Seq == 0 {
		return ErrMalformed
	}
	return nil
}

// gapMsg is a lost, forgot or void message: what a node says of the data
// messages First to Last another node sent it (lost: they never arrived)
// or it sent another node (forgot: it can no longer tell what they were);
// void (First and Last 0): it declared the other node dead, so what that
// node had pending at it is void.
type gapMsg struct {
	Kind        byte // kindLost, kindForgot or kindVoid
	Seq         uint64
	First, Last uint64
	From        string
}

func appendGap(b []byte, g *gapMsg) ([]byte, error) {
	b = append(b, g.Kind)
	b = binary.BigEndian.AppendUint64(b, g.Seq)
	b = binary.BigEndian.AppendUint64(b, g.First)
	b = binary.BigEndian.AppendUint64(b, g.Last)
	return appendStr(b, g.From)
}

func decodeGap(b []byte, g *gapMsg) error {
	if len(b) < 26 || b[0] < kindLost || b[0] > kindVoid {
		return ErrMalformed
	}
	g.Kind = b[0]
	g.Seq = binary.BigEndian.Uint64(b[1:9])
	g.First = binary.BigEndian.Uint64(b[9:17])
	g.Last = binary.BigEndian.Uint64(b[17:25])
	var rest []byte
	var err error
	if g.From, rest, err = readStr(b[25:]); err != nil || len(rest) != 0 || g.Seq == 0 {
		return ErrMalformed
	}
	if g.Kind == kindVoid {
		if g.First != 0 || g.Last != 0 {
			return ErrMalformed
		}
	} else if g.First == 0 || g.Last < g.First {
		return ErrMalformed
	}
	return nil
}

func decodeRequest(b []byte, r *Request) error {
	if len(b) < 18 || b[0] != kindRequest {
		return ErrMalformed
	}
	r.Seq = binary.BigEndian.Uint64(b[1:9])
	r.W = binary.BigEndian.Uint64(b[9:17])
	traced := b[17]&algoTrace != 0
	r.Algo = int8(b[17] &^ algoTrace)
	if r.Seq == 0 || r.W == 0 || r.Algo < 0 || r.Algo > 1 {
		return ErrMalformed
	}
	var err error
	rest := b[18:]
	if r.From, rest, err = readStr(rest); err != nil {
		return err
	}
	if r.Org, rest, err = readOptStr(rest); err != nil {
		return err
	}
	if r.Requester, rest, err = readStr(rest); err != nil {
		return err
	}
	if r.Target, rest, err = readStr(rest); err != nil {
		return err
	}
	r.Trace = nil
	if traced {
		n, err := negotiate.TraceLen(rest)
		if err != nil {
			return ErrMalformed
		}
		r.Trace, rest = rest[:n:n], rest[n:]
	}
	if len(rest) == 0 {
		return ErrMalformed
	}
	r.Frame = rest
	return nil
}

func decodeReply(b []byte, r *Reply) error {
	if len(b) < 23 || b[0] != kindReply {
		return ErrMalformed
	}
	r.Seq = binary.BigEndian.Uint64(b[1:9])
	r.W = binary.BigEndian.Uint64(b[9:17])
	r.N = binary.BigEndian.Uint32(b[17:21])
	flags := b[21]
	r.End = flags&flagEnd != 0
	r.Algo = int8(b[22])
	if r.Seq == 0 || r.W == 0 || flags&^flagEnd != 0 || r.Algo < 0 || r.Algo > 1 {
		return ErrMalformed
	}
	var err error
	rest := b[23:]
	if r.From, rest, err = readStr(rest); err != nil {
		return err
	}
	if r.Provider, rest, err = readStr(rest); err != nil {
		return err
	}
	if len(rest) == 0 {
		return ErrMalformed
	}
	r.Frame = rest
	return nil
}

// ctlMsg is every control message: heartbeats, agent events, snapshot
// requests and snapshots. Rare next to data, so JSON.
type ctlMsg struct {
	T    string `json:"t"` // hb, up, down, sync, snap, bye
	Node string `json:"node"`
	// Inc is the sender's incarnation, new at each start: a node
	// restarted under the same id (--cluster-node) is a new node to the
	// others, whose event numbers start again.
	Inc    string  `json:"inc,omitempty"`
	Seq    uint64  `json:"seq,omitempty"`
	Agent  *Agent  `json:"agent,omitempty"`  // up, down
	Agents []Agent `json:"agents,omitempty"` // snap
	// Sent (hb) is the seq of the last data message the sender published
	// to each node: a receiver that has not seen it learns that the tail
	// of what was sent to it was lost (seq.go). In a snap it has one
	// entry, for the node the snapshot is for, published in order with
	// the data to that node: it settles where the series began (seq.go's
	// settle).
	Sent map[string]uint64 `json:"sent,omitempty"`

	// What authenticates it (auth.go): To is the node it is for (empty:
	// every node), TS when it was sent (unix milliseconds), Ctr the
	// sender's count of the control messages of this incarnation, Born when
	// the incarnation began (unix nanoseconds), KX its X25519 public key
	// and Cert its certificate chain (DER, leaf first).
	To   string   `json:"to,omitempty"`
	TS   int64    `json:"ts"`
	Ctr  uint64   `json:"ctr"`
	Born int64    `json:"born"`
	KX   []byte   `json:"kx"`
	Cert [][]byte `json:"cert"`
}

// appendControl appends m, signed with sig over body (m's JSON, from
// marshalControl).
func appendControl(b, body, sig []byte) []byte {
	b = append(b, kindControl)
	b = binary.BigEndian.AppendUint16(b, uint16(len(sig)))
	return append(append(b, sig...), body...)
}

func marshalControl(m *ctlMsg) []byte {
	j, _ := json.Marshal(m) // plain strings, numbers and bytes: cannot fail
	return j
}

// decodeControl decodes b into m and returns the JSON and the signature
// over it, both aliasing b; it checks the form, not the signature.
func decodeControl(b []byte, m *ctlMsg) (body, sig []byte, err error) {
	if len(b) < 4 || b[0] != kindControl {
		return nil, nil, ErrMalformed
	}
	n := int(binary.BigEndian.Uint16(b[1:3]))
	if n == 0 || len(b) < 3+n+1 {
		return nil, nil, ErrMalformed
	}
	sig, body = b[3:3+n], b[3+n:]
	if err := json.Unmarshal(body, m); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if !subjectSafe(m.Node) || len(m.Inc) == 0 || len(m.Inc) > 64 || (m.To != "" && !subjectSafe(m.To)) || m.Ctr == 0 ||
		len(m.KX) != 32 || len(m.Cert) == 0 || len(m.Cert) > maxChain {
		return nil, nil, ErrMalformed
	}
	switch m.T {
	case "up", "down":
		if m.Agent == nil || m.Agent.valid() != nil {
			return nil, nil, ErrMalformed
		}
	case "snap":
		for i := range m.Agents {
			if m.Agents[i].valid() != nil {
				return nil, nil, ErrMalformed
			}
		}
	case "hb", "sync", "bye":
	default:
		return nil, nil, ErrMalformed
	}
	return body, sig, nil
}
