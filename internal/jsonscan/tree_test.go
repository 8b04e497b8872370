package jsonscan

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strconv"
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
		{`{"a":1,"b":2,"c":3}`, Limits{MaxMembers: 2}, ErrArrayTooLong},
		{`{"a":1,"b":2}`, Limits{MaxMembers: 2}, nil},
		{`{"a":1,"b":2,"c":3}`, Limits{MaxArray: 2}, nil},
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
	checkNumbers(t, &d, root)
}

// checkNumbers checks every number's Node.Number against strconv: integers
// exactly, floats up to serde's rounding (its default parser is not always
// correctly rounded above 2^53).
func checkNumbers(t *testing.T, d *Doc, n Node) {
	for _, c := range d.Children(n) {
		checkNumbers(t, d, c)
	}
	if n.Kind != KindNumber {
		return
	}
	lit := string(d.Text(n))
	f, integer := n.Number()
	if integer {
		var exact float64
		if u, err := strconv.ParseUint(lit, 10, 64); err == nil {
			exact = float64(u)
		} else if i, err := strconv.ParseInt(lit, 10, 64); err == nil && lit != "-0" {
			exact = float64(i)
		} else {
			t.Fatalf("%s is an integer to Number but not to strconv", lit)
		}
		if f != exact {
			t.Fatalf("%s: Number %v, want %v", lit, f, exact)
		}
		return
	}
	want, _ := strconv.ParseFloat(lit, 64)
	if diff := math.Abs(f - want); diff > 1e-15*math.Abs(want) && diff >= 1e-300 {
		t.Fatalf("%s: Number %v, strconv %v", lit, f, want)
	}
}

// serde's best-effort float parsing is correctly rounded whenever the
// significand and the power of ten are both exact; check the port there.
func TestNumberMatchesStrconvWhenExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var d Doc
	for i := 0; i < 100_000; i++ {
		sig := rng.Uint64N(1 << 53)
		exp := rng.IntN(45) - 22
		lit := strconv.FormatUint(sig, 10) + "e" + strconv.Itoa(exp)
		if rng.IntN(2) == 0 {
			lit = "-" + lit
		}
		n, err := d.Parse([]byte(lit), Limits{})
		if err != nil {
			t.Fatalf("%s: %v", lit, err)
		}
		want, _ := strconv.ParseFloat(lit, 64)
		if f, integer := n.Number(); integer || f != want {
			t.Fatalf("%s parsed to %v (integer %v), want %v", lit, f, integer, want)
		}
	}
}

func TestNumberIntegers(t *testing.T) {
	for _, tc := range []struct {
		lit     string
		f       float64
		integer bool
	}{
		{"0", 0, true},
		{"-0", math.Copysign(0, -1), false},
		{"18446744073709551615", 18446744073709551615, true},
		{"18446744073709551616", 18446744073709551616, false},
		{"-9223372036854775808", -9223372036854775808, true},
		{"-9223372036854775809", -9223372036854775809, false},
		{"1.0", 1, false},
		{"1e2", 100, false},
		{"1e-99999999999", 0, false},
		{"9007199254740991.0", 9007199254740990, false}, // serde_json issues #692, #1170
	} {
		var d Doc
		n, err := d.Parse([]byte(tc.lit), Limits{})
		if err != nil {
			t.Fatalf("%s: %v", tc.lit, err)
		}
		f, integer := n.Number()
		if f != tc.f || math.Signbit(f) != math.Signbit(tc.f) || integer != tc.integer {
			t.Errorf("%s: Number() = %v, %v; want %v, %v", tc.lit, f, integer, tc.f, tc.integer)
		}
	}
}
