package jsonscan

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

// treeValue turns a parsed node into what encoding/json (UseNumber) decodes
// the same bytes to, last duplicate winning as it does there.
func treeValue(d *Doc, n Node) any {
	switch n.Kind {
	case KindObject:
		m := map[string]any{}
		for _, c := range d.Children(n) {
			m[string(d.Name(c).AppendDecoded(nil))] = treeValue(d, c)
		}
		return m
	case KindArray:
		a := []any{}
		for _, c := range d.Children(n) {
			a = append(a, treeValue(d, c))
		}
		return a
	case KindString:
		return string(d.Str(n).AppendDecoded(nil))
	case KindNumber:
		return json.Number(d.Text(n))
	case KindTrue:
		return true
	case KindFalse:
		return false
	}
	return nil
}

func TestParse(t *testing.T) {
	for _, src := range []string{
		`{}`, `[]`, ` 5 `, `"a\u00e9\n"`, `null`, `[true,false,null]`,
		`{"a":{},"b":[],"c":[{"d":[1,2,{"e":"f"}]}],"\u0061":-0.5e3}`,
		`[[[]],[{}],{"x":[[1]]}]`,
	} {
		checkTree(t, []byte(src))
	}
}

func TestParseKeepsDuplicatesAndSpans(t *testing.T) {
	src := []byte(`{"a":1, "a" : "two","b":[ 3 ]}`)
	var d Doc
	root, err := d.Parse(src, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range d.Children(root) {
		got = append(got, string(d.Name(m).Raw)+"="+string(src[m.Start:m.End]))
	}
	if want := []string{`a=1`, `a="two"`, `b=[ 3 ]`}; !reflect.DeepEqual(got, want) {
		t.Fatalf("members %q, want %q", got, want)
	}
}

func TestParseLimits(t *testing.T) {
	for _, tc := range []struct {
		src  string
		lim  Limits
		want error
	}{
		{`{"a":1,"b":2,"c":3}`, Limits{MaxArray: 2}, ErrArrayTooLong},
		{`{"a":1,"b":2}`, Limits{MaxArray: 2}, nil},
		{`[1,2,3]`, Limits{MaxArray: 2}, ErrArrayTooLong},
		{`[[[]]]`, Limits{MaxDepth: 2}, ErrDepth},
		{`{"abcd":1}`, Limits{MaxString: 3}, ErrStringTooLong},
		{`{"a":"\ud800"}`, Limits{}, ErrSyntax},
		{"[\"\xff\"]", Limits{}, ErrSyntax},
		{`{"a":1,}`, Limits{}, ErrSyntax},
	} {
		var d Doc
		_, err := d.Parse([]byte(tc.src), tc.lim)
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s: %v, want %v", tc.src, err, tc.want)
		}
	}
}

// checkTree checks Parse on a document Validate accepts: the root spans the
// document, and the tree is what encoding/json decodes.
func checkTree(t *testing.T, data []byte) {
	var d Doc
	root, err := d.Parse(data, Limits{})
	if err != nil {
		t.Fatalf("Parse refused %q: %v", data, err)
	}
	if !bytes.Equal(d.Text(root), bytes.TrimSpace(data)) {
		t.Fatalf("root spans %q", d.Text(root))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var want any
	if err := dec.Decode(&want); err != nil {
		t.Fatal(err)
	}
	if got := treeValue(&d, root); !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: tree %#v, encoding/json %#v", data, got, want)
	}
}
