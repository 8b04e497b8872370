package negotiate

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/m2md/m2md/internal/jsonscan"
)

// Control messages are read with internal/jsonscan, the parser the frame
// codec validates with, in its tree mode. encoding/json does not fit: it
// matches member names case-insensitively ("TIMESTAMP" would satisfy the
// required "timestamp"), lets the last of duplicate members win silently, has
// no depth limit below 10,000, and replaces invalid UTF-8 instead of refusing
// it. jsonscan refuses invalid UTF-8, raw control characters and unpaired
// surrogate escapes, as serde_json does, and bounds depth, strings and the
// elements of arrays and members of objects while it reads (docs/protocol.md §3).

// jsonValue is a node of a parsed envelope with the document it belongs to.
type jsonValue struct {
	doc *jsonscan.Doc
	jsonscan.Node
}

func kindName(k jsonscan.Kind) string {
	switch k {
	case jsonscan.KindTrue, jsonscan.KindFalse:
		return "boolean"
	case jsonscan.KindNumber:
		return "number"
	case jsonscan.KindString:
		return "string"
	case jsonscan.KindArray:
		return "array"
	case jsonscan.KindObject:
		return "object"
	}
	return "null"
}

// text returns a string node's decoded value.
func (v *jsonValue) text() string {
	s := v.doc.Str(v.Node)
	if !s.Escaped {
		return string(s.Raw)
	}
	return string(s.AppendDecoded(make([]byte, 0, s.Len)))
}

func parseJSON(data []byte, lim jsonscan.Limits) (jsonValue, error) {
	doc := new(jsonscan.Doc)
	root, err := doc.Parse(data, lim)
	if err != nil {
		var se *jsonscan.Error
		if errors.As(err, &se) {
			return jsonValue{}, fmt.Errorf("%w: JSON offset %d: %s", ErrMalformedControl, se.Offset, se.Reason)
		}
		return jsonValue{}, fmt.Errorf("%w: %v", ErrMalformedControl, err)
	}
	return jsonValue{doc: doc, Node: root}, nil
}

// Typed access. Member names match exactly; a name that occurs twice is an
// error (a message must not mean two things); unknown members are ignored.
// For optional members, null is the same as absent.

type jsonObj struct {
	v    *jsonValue
	path string
}

func (o jsonObj) errorf(name, format string, args ...any) error {
	return fmt.Errorf("%w: %s%s: %s", ErrMalformedControl, o.path, name, fmt.Sprintf(format, args...))
}

// get returns the member's value, or nil if it is absent or null.
func (o jsonObj) get(name string) (*jsonValue, error) {
	var found *jsonscan.Node
	members := o.v.doc.Children(o.v.Node)
	for i := range members {
		if !o.v.doc.HasName(&members[i], name) {
			continue
		}
		if found != nil {
			return nil, o.errorf(name, "duplicate member")
		}
		found = &members[i]
	}
	if found == nil || found.Kind == jsonscan.KindNull {
		return nil, nil
	}
	return &jsonValue{doc: o.v.doc, Node: *found}, nil
}

// span returns where the member's value is written; zero when absent.
func (o jsonObj) span(name string) span {
	members := o.v.doc.Children(o.v.Node)
	for i := range members {
		if o.v.doc.HasName(&members[i], name) {
			return span{int(members[i].Start), int(members[i].End)}
		}
	}
	return span{}
}

func (o jsonObj) typed(name string, kind jsonscan.Kind, required bool) (*jsonValue, error) {
	v, err := o.get(name)
	if err != nil {
		return nil, err
	}
	if v == nil {
		if required {
			return nil, o.errorf(name, "required member missing")
		}
		return nil, nil
	}
	if v.Kind != kind && !(kind == jsonscan.KindTrue && v.Kind == jsonscan.KindFalse) {
		return nil, o.errorf(name, "expected %s, got %s", kindName(kind), kindName(v.Kind))
	}
	return v, nil
}

func (o jsonObj) object(name string, required bool) (jsonObj, bool, error) {
	v, err := o.typed(name, jsonscan.KindObject, required)
	if v == nil {
		return jsonObj{}, false, err
	}
	return jsonObj{v: v, path: o.path + name + "."}, true, nil
}

func (o jsonObj) str(name string, required bool) (string, bool, error) {
	v, err := o.typed(name, jsonscan.KindString, required)
	if v == nil {
		return "", false, err
	}
	return v.text(), true, nil
}

func (o jsonObj) boolean(name string, required bool) (bool, error) {
	v, err := o.typed(name, jsonscan.KindTrue, required)
	if v == nil {
		return false, err
	}
	return v.Kind == jsonscan.KindTrue, nil
}

// uint reads a non-negative integer literal (no fraction, no exponent, no
// sign) that fits in 64 bits: serde_json's as_u64.
func (o jsonObj) uint(name string, required bool) (uint64, bool, error) {
	v, err := o.typed(name, jsonscan.KindNumber, required)
	if v == nil {
		return 0, false, err
	}
	lit := string(v.doc.Text(v.Node))
	n, err := strconv.ParseUint(lit, 10, 64)
	if err != nil {
		return 0, false, o.errorf(name, "not an unsigned 64-bit integer: %s", lit)
	}
	return n, true, nil
}

func (o jsonObj) float32(name string, required bool) (float32, error) {
	v, err := o.typed(name, jsonscan.KindNumber, required)
	if v == nil {
		return 0, err
	}
	lit := string(v.doc.Text(v.Node))
	f, err := strconv.ParseFloat(lit, 32)
	if err != nil {
		return 0, o.errorf(name, "not a 32-bit float: %s", lit)
	}
	return float32(f), nil
}

func (o jsonObj) strings(name string, required bool) ([]string, bool, error) {
	v, err := o.typed(name, jsonscan.KindArray, required)
	if v == nil {
		return nil, false, err
	}
	elems := v.doc.Children(v.Node)
	out := make([]string, len(elems))
	for i, e := range elems {
		if e.Kind != jsonscan.KindString {
			return nil, false, o.errorf(name, "element %d: expected string, got %s", i, kindName(e.Kind))
		}
		out[i] = (&jsonValue{doc: v.doc, Node: e}).text()
	}
	return out, true, nil
}

// stringMap reads an object whose members are all strings (Rust's
// HashMap<String, String>). Duplicate names are an error.
func (o jsonObj) stringMap(name string) (map[string]string, error) {
	v, err := o.typed(name, jsonscan.KindObject, false)
	if v == nil {
		return nil, err
	}
	members := v.doc.Children(v.Node)
	out := make(map[string]string, len(members))
	for _, m := range members {
		key := string(v.doc.Name(m).AppendDecoded(nil))
		if m.Kind != jsonscan.KindString {
			return nil, o.errorf(name, "member %q: expected string, got %s", key, kindName(m.Kind))
		}
		if _, dup := out[key]; dup {
			return nil, o.errorf(name, "duplicate member %q", key)
		}
		out[key] = (&jsonValue{doc: v.doc, Node: m}).text()
	}
	return out, nil
}
