package cluster

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"unsafe"
)

// Messages on the cluster's subjects. Data (requests and replies) is binary
// and carries the frame as the daemon verified it, unprotected: the NATS
// connections between nodes are what authenticate it in transit, and the
// delivering node protects it again for its session.
//
//	request: 0x01 | w u64 | algo u8 | len u8 | from node | len u8 | org | len u8 | requester | len u8 | target | frame
//	reply:   0x02 | w u64 | flags u8 | algo u8 | len u8 | from node | len u8 | provider | frame
//	control: 0x03 | JSON (ctlMsg)
//	cancel:  0x04 | w u64 | len u8 | from node
//	notice:  0x05 | w u64 | len u8 | from node | len u8 | code | message
//
// w is the requesting node's id for the request (see Handler). Integers are
// big-endian. Strings are 1 to 255 bytes, except org, which is empty for
// the open namespace of daemons without org secrets.
const (
	kindRequest = 0x01
	kindReply   = 0x02
	kindControl = 0x03
	kindCancel  = 0x04
	kindNotice  = 0x05

	flagEnd = 0x01
)

// ErrMalformed is returned for a cluster message that cannot be decoded.
var ErrMalformed = errors.New("cluster: malformed message")

// Request is a request crossing to the node of its provider.
type Request struct {
	From      string // the requesting node
	W         uint64 // the requesting node's id for it; echoed in replies
	Org       string // the requester's org: the provider is looked up there
	Requester string // the requesting agent's id (the provider sees it as peer)
	Target    string // the provider's agent id
	Algo      int8   // 0 M2M frame, 1 TokenNative (as the daemon's DATA path)
	Frame     []byte // valid only during the Handler call
	// Shed (not on the wire): the node's inbox holds Config.Inbox
	// messages or more, so the Handler answers the request with an error
	// instead of delivering it.
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
	From     string // the provider's node
	W        uint64
	End      bool
	Provider string // the provider's agent id (the requester sees it as peer)
	Algo     int8
	Frame    []byte // valid only during the Handler call
	// Shed (not on the wire): as Request.Shed; the Handler ends the
	// requester's request with an error instead of delivering the reply.
	Shed bool
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
	b = binary.BigEndian.AppendUint64(b, r.W)
	b = append(b, byte(r.Algo))
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
	return append(b, r.Frame...), nil
}

func appendReply(b []byte, r *Reply) ([]byte, error) {
	b = append(b, kindReply)
	b = binary.BigEndian.AppendUint64(b, r.W)
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
	From    string // the requesting node
	W       uint64 // its id for the request
	Code    string // the wire error code (negotiate.ErrorCode)
	Message string
}

func appendNotice(b []byte, n *Notice) ([]byte, error) {
	b = append(b, kindNotice)
	b = binary.BigEndian.AppendUint64(b, n.W)
	var err error
	for _, s := range [...]string{n.From, n.Code} {
		if b, err = appendStr(b, s); err != nil {
			return b, err
		}
	}
	return append(b, n.Message...), nil
}

func decodeNotice(b []byte, n *Notice) error {
	if len(b) < 10 || b[0] != kindNotice {
		return ErrMalformed
	}
	n.W = binary.BigEndian.Uint64(b[1:9])
	var err error
	rest := b[9:]
	if n.From, rest, err = readStr(rest); err != nil || n.W == 0 {
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
	From string // the requesting node
	W    uint64 // its id for the request
}

func appendCancel(b []byte, c *Cancel) ([]byte, error) {
	b = append(b, kindCancel)
	b = binary.BigEndian.AppendUint64(b, c.W)
	return appendStr(b, c.From)
}

func decodeCancel(b []byte, c *Cancel) error {
	if len(b) < 10 || b[0] != kindCancel {
		return ErrMalformed
	}
	c.W = binary.BigEndian.Uint64(b[1:9])
	var rest []byte
	var err error
	if c.From, rest, err = readStr(b[9:]); err != nil || len(rest) != 0 || c.W == 0 {
		return ErrMalformed
	}
	return nil
}

func decodeRequest(b []byte, r *Request) error {
	if len(b) < 10 || b[0] != kindRequest {
		return ErrMalformed
	}
	r.W = binary.BigEndian.Uint64(b[1:9])
	r.Algo = int8(b[9])
	if r.W == 0 || r.Algo < 0 || r.Algo > 1 {
		return ErrMalformed
	}
	var err error
	rest := b[10:]
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
	if len(rest) == 0 {
		return ErrMalformed
	}
	r.Frame = rest
	return nil
}

func decodeReply(b []byte, r *Reply) error {
	if len(b) < 11 || b[0] != kindReply {
		return ErrMalformed
	}
	r.W = binary.BigEndian.Uint64(b[1:9])
	flags := b[9]
	r.End = flags&flagEnd != 0
	r.Algo = int8(b[10])
	if r.W == 0 || flags&^flagEnd != 0 || r.Algo < 0 || r.Algo > 1 {
		return ErrMalformed
	}
	var err error
	rest := b[11:]
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
}

func appendControl(b []byte, m *ctlMsg) []byte {
	j, _ := json.Marshal(m) // plain strings and numbers: cannot fail
	return append(append(b, kindControl), j...)
}

func decodeControl(b []byte, m *ctlMsg) error {
	if len(b) < 2 || b[0] != kindControl {
		return ErrMalformed
	}
	if err := json.Unmarshal(b[1:], m); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if !subjectSafe(m.Node) || len(m.Inc) > 64 {
		return ErrMalformed
	}
	switch m.T {
	case "up", "down":
		if m.Agent == nil || m.Agent.valid() != nil {
			return ErrMalformed
		}
	case "snap":
		for i := range m.Agents {
			if m.Agents[i].valid() != nil {
				return ErrMalformed
			}
		}
	case "hb", "sync", "bye":
	default:
		return ErrMalformed
	}
	return nil
}
