package jsonscan

import (
	"math"
	"unsafe"
)

// Node is one value of a document read by Parse. Its strings are read
// through the Doc: Doc.Name, Doc.Str, Doc.Text. It is 32 bytes, so a
// document costs its input plus 32 bytes a value.
type Node struct {
	Kind Kind
	// A member's name is escaped; a string value is escaped; a number is
	// one serde_json keeps as an integer.
	nameEsc, strEsc, numInt bool
	// Start and End delimit the value as written in the input (a string's
	// quotes included), e.g. to blank it in place.
	Start, End int32

	// A member's name, as written between its quotes, and its decoded length.
	nameStart, nameEnd, nameLen int32
	// Children: Doc.nodes[a : a+b]. A string value: its decoded length in a.
	// A number: its float64 bits.
	a, b uint32
}

// Number returns a KindNumber node's value as serde_json's as_f64 gives it,
// and whether serde_json keeps the number as an integer (a literal without
// fraction or exponent that fits a u64, or an i64 when negative), in which
// case Doc.Text is its canonical form. Out-of-range numbers were refused by
// Parse, as serde_json refuses them.
func (n Node) Number() (f float64, integer bool) {
	return math.Float64frombits(uint64(n.a)<<32 | uint64(n.b)), n.numInt
}

// Doc is a document read by Parse: a tree of Nodes held in one slice, with
// strings and numbers aliasing the input. Reuse a Doc to reuse its memory.
type Doc struct {
	data  []byte
	nodes []Node // finished children, contiguous per container
	stack []Node // children of containers still open; the root at the end
	last  Node   // the container closed last
}

// Parse validates data within lim, as Validate does, and records every
// value; lim.MaxMembers bounds the members of one object. Duplicate member
// names are kept, in order: what they mean is the caller's rule.
func (d *Doc) Parse(data []byte, lim Limits) (Node, error) {
	if len(data) > math.MaxInt32 {
		return Node{}, &Error{Err: ErrSyntax, Reason: "document larger than 2 GiB"}
	}
	if d.nodes == nil {
		// Room for a typical control message without regrowing.
		d.nodes, d.stack = make([]Node, 0, 64), make([]Node, 0, 16)
	}
	*d = Doc{data: data, nodes: d.nodes[:0], stack: d.stack[:0]}
	s := scanner{data: data, lim: lim.effective(), tree: d}
	if err := s.document(ctxTree); err != nil {
		return Node{}, err
	}
	return d.stack[len(d.stack)-1], nil
}

// Children returns the elements of an array or the members of an object,
// in document order.
func (d *Doc) Children(n Node) []Node {
	if n.Kind != KindArray && n.Kind != KindObject {
		return nil
	}
	return d.nodes[n.a : n.a+n.b : n.a+n.b]
}

// Text returns the node as written: a number's literal.
func (d *Doc) Text(n Node) []byte {
	return d.data[n.Start:n.End]
}

// Str returns a KindString node's value.
func (d *Doc) Str(n Node) Str {
	if n.Kind != KindString {
		return Str{}
	}
	return Str{Raw: d.data[n.Start+1 : n.End-1 : n.End-1], Len: int(n.a), Escaped: n.strEsc, IsString: true}
}

// Name returns the name of an object's member.
func (d *Doc) Name(n Node) Str {
	return Str{Raw: d.data[n.nameStart:n.nameEnd:n.nameEnd], Len: int(n.nameLen), Escaped: n.nameEsc, IsString: true}
}

// push records the value the scanner has just finished; name, written at
// nameAt, when it is an object's member.
func (d *Doc) push(s *scanner, k Kind, start int, name Str, nameAt int) {
	n := Node{Kind: k, Start: int32(start), End: int32(s.pos)}
	if name.IsString {
		n.nameStart, n.nameEnd = int32(nameAt), int32(nameAt+len(name.Raw))
		n.nameLen, n.nameEsc = int32(name.Len), name.Escaped
	}
	switch k {
	case KindString:
		n.a, n.strEsc = uint32(s.str.Len), s.str.Escaped
	case KindNumber:
		bits := math.Float64bits(s.num)
		n.a, n.b, n.numInt = uint32(bits>>32), uint32(bits), s.numInt
	case KindArray, KindObject:
		n.a, n.b = d.last.a, d.last.b
	}
	d.stack = append(d.stack, n)
}

// close moves the children of the container that has just ended, which
// begin at stack[base], to nodes.
func (d *Doc) close(base int) {
	d.last = Node{a: uint32(len(d.nodes)), b: uint32(len(d.stack) - base)}
	d.nodes = append(d.nodes, d.stack[base:]...)
	d.stack = d.stack[:base]
}

// HasName reports whether member n's decoded name is name: the member
// lookup, kept cheap because it runs once per member per lookup.
func (d *Doc) HasName(n *Node, name string) bool {
	if int(n.nameLen) != len(name) {
		return false
	}
	if !n.nameEsc {
		return string(d.data[n.nameStart:n.nameEnd]) == name
	}
	return d.Name(*n).Equal(name)
}

// Size reports the bytes of node storage d keeps for reuse, so a pool can
// drop a Doc grown by one huge document.
func (d *Doc) Size() int {
	return (cap(d.nodes) + cap(d.stack)) * int(unsafe.Sizeof(Node{}))
}

// Release forgets the input (so a pooled Doc does not pin it) and keeps
// the storage for the next Parse.
func (d *Doc) Release() {
	*d = Doc{nodes: d.nodes[:0], stack: d.stack[:0]}
}
