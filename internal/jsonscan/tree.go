package jsonscan

import "math"

// Node is one value of a document read by Parse. Its strings are read
// through the Doc: Doc.Name, Doc.Str, Doc.Text.
type Node struct {
	Kind Kind
	// Start and End delimit the value as written in the input (a string's
	// quotes included), e.g. to blank it in place.
	Start, End int

	// A member's name, as written between its quotes, and its decoded
	// length; a string value's decoded length (its span is Start+1..End-1).
	nameEsc, strEsc    bool
	nameStart, nameEnd int32
	nameLen, strLen    int32
	first, count       int32 // children: Doc.nodes[first : first+count]
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
// value. lim.MaxArray also bounds the members of one object. Duplicate
// member names are kept, in order: what they mean is the caller's rule.
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
	return d.nodes[n.first : n.first+n.count : n.first+n.count]
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
	return Str{Raw: d.data[n.Start+1 : n.End-1 : n.End-1], Len: int(n.strLen), Escaped: n.strEsc, IsString: true}
}

// Name returns the name of an object's member.
func (d *Doc) Name(n Node) Str {
	return Str{Raw: d.data[n.nameStart:n.nameEnd:n.nameEnd], Len: int(n.nameLen), Escaped: n.nameEsc, IsString: true}
}

// push records the value the scanner has just finished; name, written at
// nameAt, when it is an object's member.
func (d *Doc) push(s *scanner, k Kind, start int, name Str, nameAt int) {
	n := Node{Kind: k, Start: start, End: s.pos}
	if name.IsString {
		n.nameStart, n.nameEnd = int32(nameAt), int32(nameAt+len(name.Raw))
		n.nameLen, n.nameEsc = int32(name.Len), name.Escaped
	}
	switch k {
	case KindString:
		n.strLen, n.strEsc = int32(s.str.Len), s.str.Escaped
	case KindArray, KindObject:
		n.first, n.count = d.last.first, d.last.count
	}
	d.stack = append(d.stack, n)
}

// close moves the children of the container that has just ended, which
// begin at stack[base], to nodes.
func (d *Doc) close(base int) {
	d.last = Node{first: int32(len(d.nodes)), count: int32(len(d.stack) - base)}
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
