package legacy

import (
	"bytes"
	"cmp"
	"errors"
	"math"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/m2md/m2md/frame"
	"github.com/m2md/m2md/internal/jsonscan"
)

// PrefixT1 starts a T1 message: the prefix, then compact JSON.
const PrefixT1 = "#T1|"

// T1Options configures EncodeT1. The zero value is the Rust reference's
// default codec: keys, roles and models abbreviated, nulls and defaults
// removed, pattern table off, spec limits.
type T1Options struct {
	// Patterns applies the optional pattern table (wire reference §6.2)
	// after serialization. The Rust default leaves it off; the decoder
	// always expands patterns, so either setting decodes.
	Patterns bool
	// Limits bounds the JSON input (MaxDepth, MaxString, MaxArray, and its
	// size by MaxDecompressed) and the encoded message (MaxMessage). Zero
	// fields mean the spec defaults.
	Limits frame.Limits
}

// EncodeT1 appends the T1 form of the JSON document jsonText to dst.
//
// T1 is lossy by design, exactly like the Rust TokenCodec: at every depth
// members whose value is null are dropped, as are the defaults
// temperature/top_p ≈ 1.0 (within 0.001), n = 1, stream = false,
// frequency/presence_penalty = 0 and logit_bias = {} (judged on the original
// key); the 25 keys of §6.2 are abbreviated everywhere; role values under
// "role" and model names under "model" are abbreviated; keys are sorted by
// their UTF-8 bytes and numbers are re-formatted as serde_json does.
//
// jsonText must be valid UTF-8 JSON within opts.Limits. On error nothing is
// appended: dst is returned with its original length.
func EncodeT1(dst, jsonText []byte, opts T1Options) ([]byte, error) {
	lim := opts.Limits.Effective()
	if len(jsonText) > lim.MaxDecompressed {
		return dst, sizeError(codecT1, "JSON input", len(jsonText), lim.MaxDecompressed)
	}
	if i := invalidUTF8(jsonText); i >= 0 {
		return dst, newError(codecT1, ErrNotUTF8, i, "")
	}
	st := getT1State()
	defer putT1State(st)

	root, err := st.parse(jsonText, lim)
	if err != nil {
		return dst, err
	}
	start := len(dst)
	st.w = append(dst, PrefixT1...)
	st.outStart, st.maxOut, st.outWhat = start, lim.MaxMessage, "encoded message"
	if err := st.compressValue(root, nil); err != nil {
		return dst[:start], err
	}
	out := st.w
	if opts.Patterns {
		out = applyT1Patterns(out, start+len(PrefixT1))
	}
	return out, nil
}

// DecodeT1 appends to dst the JSON text that the Rust reference's T1 decoder
// yields for src: patterns expanded, keys, roles and models expanded, the
// six request defaults restored into the outermost objects that carry
// "messages" or "model", serialized compactly with sorted keys. src may
// start with PrefixT1 or be the bare JSON.
//
// On error nothing is appended: dst is returned with its original length.
// Error offsets count from the start of the JSON text after the prefix (and
// after pattern expansion, if the message used patterns).
func DecodeT1(dst, src []byte, limits frame.Limits) ([]byte, error) {
	lim := limits.Effective()
	if len(src) > lim.MaxMessage {
		return dst, sizeError(codecT1, "message", len(src), lim.MaxMessage)
	}
	body := bytes.TrimPrefix(src, []byte(PrefixT1))
	if i := invalidUTF8(body); i >= 0 {
		return dst, newError(codecT1, ErrNotUTF8, i, "")
	}
	st := getT1State()
	defer putT1State(st)

	text := body
	if n := t1ExpandedLen(body); n != len(body) {
		if n > lim.MaxDecompressed {
			return dst, sizeError(codecT1, "pattern-expanded JSON", n, lim.MaxDecompressed)
		}
		st.expanded = expandT1Patterns(slices.Grow(st.expanded[:0], n), body)
		text = st.expanded
	}
	root, err := st.parse(text, lim)
	if err != nil {
		return dst, err
	}
	start := len(dst)
	st.w = dst
	st.outStart, st.maxOut, st.outWhat = start, lim.MaxDecompressed, "decoded JSON"
	if err := st.expandValue(root, nil, true); err != nil {
		return dst[:start], err
	}
	return st.w, nil
}

// t1State is the per-call working memory, pooled so that steady-state
// encoding and decoding allocate nothing but the output.
type t1State struct {
	doc      jsonscan.Doc
	entries  []entry // members of the objects being written, as a stack
	keys     []byte  // decoded keys that contained escapes
	scratch  []byte  // decoded string values
	expanded []byte  // pattern-expanded input
	w        []byte  // output being written
	outStart int
	maxOut   int
	outWhat  string
}

// entry is one member of an object on its way out: the key it will be
// written under, the key it was read under and where its value is.
type entry struct {
	out  []byte
	orig []byte
	idx  int32 // member ordinal in the input object, or -1-k for restored default k
}

var t1Pool = sync.Pool{New: func() any { return new(t1State) }}

func getT1State() *t1State { return t1Pool.Get().(*t1State) }

// Buffers grown by one huge message are dropped rather than pinned by the pool.
const maxPooledBytes = 1 << 20

func putT1State(st *t1State) {
	st.w = nil
	if st.doc.Size() > maxPooledBytes || cap(st.entries) > maxPooledBytes/56 ||
		cap(st.keys) > maxPooledBytes || cap(st.scratch) > maxPooledBytes || cap(st.expanded) > maxPooledBytes {
		return
	}
	st.doc.Release()
	st.entries = st.entries[:0]
	t1Pool.Put(st)
}

// parse reads src with internal/jsonscan, whose numbers are serde_json's,
// and maps its errors to this package's.
func (st *t1State) parse(src []byte, lim frame.Limits) (jsonscan.Node, error) {
	st.keys = st.keys[:0]
	root, err := st.doc.Parse(src, lim)
	if err == nil {
		return root, nil
	}
	var e *jsonscan.Error
	if !errors.As(err, &e) {
		return root, newError(codecT1, ErrMalformed, -1, err.Error())
	}
	kind := ErrLimit
	if errors.Is(err, jsonscan.ErrSyntax) {
		kind = ErrMalformed
	}
	return root, newError(codecT1, kind, e.Offset, e.Reason)
}

// key returns the decoded name of an object's member.
func (st *t1State) key(m jsonscan.Node) []byte {
	name := st.doc.Name(m)
	if !name.Escaped {
		return name.Raw
	}
	// Earlier keys stay valid when keys grows: append never changes them.
	start := len(st.keys)
	st.keys = name.AppendDecoded(st.keys)
	return st.keys[start:]
}

func (st *t1State) checkSize() error {
	if n := len(st.w) - st.outStart; n > st.maxOut {
		return sizeError(codecT1, st.outWhat, n, st.maxOut)
	}
	return nil
}

// stringValue returns the decoded bytes of a string node.
func (st *t1State) stringValue(n jsonscan.Node) []byte {
	s := st.doc.Str(n)
	if !s.Escaped {
		return s.Raw
	}
	st.scratch = s.AppendDecoded(st.scratch[:0])
	return st.scratch
}

func (st *t1State) writeScalar(n jsonscan.Node) error {
	switch n.Kind {
	case jsonscan.KindNull:
		st.w = append(st.w, "null"...)
	case jsonscan.KindFalse:
		st.w = append(st.w, "false"...)
	case jsonscan.KindTrue:
		st.w = append(st.w, "true"...)
	case jsonscan.KindNumber:
		if f, integer := n.Number(); integer {
			st.w = append(st.w, st.doc.Text(n)...) // serde's u64/i64: the literal is its canonical text
		} else {
			st.w = appendFloat(st.w, f)
		}
	case jsonscan.KindString:
		if s := st.doc.Str(n); s.Escaped {
			st.w = jsonscan.AppendString(st.w, st.stringValue(n))
		} else {
			st.w = append(st.w, '"')
			st.w = append(st.w, s.Raw...)
			st.w = append(st.w, '"')
		}
	}
	return st.checkSize()
}

// mappedString writes a string node through a value table if ctx selects one.
func (st *t1State) mappedString(n jsonscan.Node, table map[string][]byte) (bool, error) {
	if table == nil {
		return false, nil
	}
	v, ok := table[string(st.stringValue(n))]
	if !ok {
		return false, nil
	}
	st.w = jsonscan.AppendString(st.w, v)
	return true, st.checkSize()
}

func isKey(k []byte, a, b string) bool { return string(k) == a || string(k) == b }

// --- encoding (Rust TokenCodec::compress_value) ---

func (st *t1State) compressValue(n jsonscan.Node, ctx []byte) error {
	switch n.Kind {
	case jsonscan.KindObject:
		return st.compressObject(n)
	case jsonscan.KindArray:
		// Elements inherit the array's key, so strings in an array under
		// "role" or "model" are mapped too.
		st.w = append(st.w, '[')
		for i, e := range st.doc.Children(n) {
			if i > 0 {
				st.w = append(st.w, ',')
			}
			if err := st.compressValue(e, ctx); err != nil {
				return err
			}
		}
		st.w = append(st.w, ']')
		return st.checkSize()
	case jsonscan.KindString:
		var table map[string][]byte
		switch {
		case isKey(ctx, "role", "r"):
			table = t1RoleAbbrev
		case isKey(ctx, "model", "M"):
			table = t1ModelAbbrev
		}
		if done, err := st.mappedString(n, table); done || err != nil {
			return err
		}
	}
	return st.writeScalar(n)
}

func (st *t1State) compressObject(n jsonscan.Node) error {
	base := len(st.entries)
	members := st.doc.Children(n)
	for i, m := range members {
		orig := st.key(m)
		out := orig
		if abbr, ok := t1KeyAbbrev[string(orig)]; ok {
			out = abbr
		}
		st.entries = append(st.entries, entry{out: out, orig: orig, idx: int32(i)})
	}
	ents := st.entries[base:]
	slices.SortFunc(ents, compareEntries)

	// Rust parses into a sorted map (the last duplicate key wins), drops
	// nulls and defaults from it, then inserts each survivor under its
	// abbreviated key in original-key order, so among members that collide
	// after abbreviation the greatest original key wins.
	st.w = append(st.w, '{')
	first := true
	for i := 0; i < len(ents); {
		winner := -1
		j := i
		for j < len(ents) && bytes.Equal(ents[j].out, ents[i].out) {
			k := j
			for k+1 < len(ents) && bytes.Equal(ents[k+1].out, ents[j].out) && bytes.Equal(ents[k+1].orig, ents[j].orig) {
				k++
			}
			if !st.droppedOnEncode(string(ents[k].orig), members[ents[k].idx]) {
				winner = k
			}
			j = k + 1
		}
		if winner >= 0 {
			e := ents[winner]
			if !first {
				st.w = append(st.w, ',')
			}
			first = false
			st.w = jsonscan.AppendString(st.w, e.out)
			st.w = append(st.w, ':')
			if err := st.compressValue(members[e.idx], e.orig); err != nil {
				return err
			}
		}
		i = j
	}
	st.w = append(st.w, '}')
	st.entries = st.entries[:base]
	return st.checkSize()
}

// droppedOnEncode is Rust's remove_nulls plus is_default_value, for the
// member v read under the key orig.
func (st *t1State) droppedOnEncode(orig string, v jsonscan.Node) bool {
	if v.Kind == jsonscan.KindNull {
		return true
	}
	f, integer := v.Number()
	isNumber := v.Kind == jsonscan.KindNumber
	switch orig {
	case "temperature", "T", "top_p", "p":
		return isNumber && math.Abs(f-1) < 0.001 // as_f64()
	case "n":
		return isNumber && integer && string(st.doc.Text(v)) == "1" // as_i64() == Some(1)
	case "stream", "s":
		return v.Kind == jsonscan.KindFalse
	case "frequency_penalty", "f", "presence_penalty", "P":
		// as_i64() == Some(0) || as_f64() == Some(0.0); -0 parses as the float -0.0.
		return isNumber && f == 0
	case "logit_bias", "lb":
		return v.Kind == jsonscan.KindObject && len(st.doc.Children(v)) == 0
	}
	return false
}

// --- decoding (Rust TokenCodec::expand_value + restore_defaults) ---

func (st *t1State) expandValue(n jsonscan.Node, ctx []byte, restore bool) error {
	switch n.Kind {
	case jsonscan.KindObject:
		return st.expandObject(n, restore)
	case jsonscan.KindArray:
		st.w = append(st.w, '[')
		for i, e := range st.doc.Children(n) {
			if i > 0 {
				st.w = append(st.w, ',')
			}
			if err := st.expandValue(e, ctx, restore); err != nil {
				return err
			}
		}
		st.w = append(st.w, ']')
		return st.checkSize()
	case jsonscan.KindString:
		var table map[string][]byte
		switch {
		case isKey(ctx, "role", "r"):
			table = t1RoleExpand
		case isKey(ctx, "model", "M"):
			table = t1ModelExpand
		}
		if done, err := st.mappedString(n, table); done || err != nil {
			return err
		}
	}
	return st.writeScalar(n)
}

func (st *t1State) expandObject(n jsonscan.Node, restore bool) error {
	base := len(st.entries)
	isRequest := false
	members := st.doc.Children(n)
	for i, m := range members {
		orig := st.key(m)
		out := orig
		if full, ok := t1KeyExpand[string(orig)]; ok {
			out = full
		}
		if restore && (string(out) == "messages" || string(out) == "model") {
			isRequest = true
		}
		st.entries = append(st.entries, entry{out: out, orig: orig, idx: int32(i)})
	}
	if isRequest {
		members := len(st.entries)
		for k, d := range t1Defaults {
			if !hasOutKey(st.entries[base:members], d.key) {
				st.entries = append(st.entries, entry{out: d.key, idx: int32(-1 - k)})
			}
		}
	}
	ents := st.entries[base:]
	slices.SortFunc(ents, compareEntries)

	// Defaults go only into the outermost request-like objects: Rust's
	// restore_defaults does not descend into an object it filled in.
	childRestore := restore && !isRequest
	st.w = append(st.w, '{')
	for i := 0; i < len(ents); {
		j := i
		for j+1 < len(ents) && bytes.Equal(ents[j+1].out, ents[i].out) {
			j++
		}
		e := ents[j] // greatest original key, last occurrence: Rust's insert order
		if i > 0 {
			st.w = append(st.w, ',')
		}
		st.w = jsonscan.AppendString(st.w, e.out)
		st.w = append(st.w, ':')
		if e.idx < 0 {
			st.w = append(st.w, t1Defaults[-1-e.idx].value...)
		} else if err := st.expandValue(members[e.idx], e.out, childRestore); err != nil {
			return err
		}
		i = j + 1
	}
	st.w = append(st.w, '}')
	st.entries = st.entries[:base]
	return st.checkSize()
}

func hasOutKey(ents []entry, key []byte) bool {
	for _, e := range ents {
		if bytes.Equal(e.out, key) {
			return true
		}
	}
	return false
}

func compareEntries(a, b entry) int {
	if c := bytes.Compare(a.out, b.out); c != 0 {
		return c
	}
	if c := bytes.Compare(a.orig, b.orig); c != 0 {
		return c
	}
	return cmp.Compare(a.idx, b.idx)
}

// --- pattern table ---

// applyT1Patterns replaces, in table order, every occurrence of each
// pattern in b[from:] by its control byte, in place (each replacement
// shrinks the text, so writing never overtakes reading).
func applyT1Patterns(b []byte, from int) []byte {
	for i, pat := range t1Patterns {
		code := byte(i + 1)
		tail := b[from:]
		at := bytes.Index(tail, []byte(pat))
		if at < 0 {
			continue
		}
		w := from + at
		r := w
		for at >= 0 {
			b[w] = code
			w++
			r += len(pat)
			at = bytes.Index(b[r:], []byte(pat))
			end := len(b)
			if at >= 0 {
				end = r + at
			}
			w += copy(b[w:], b[r:end])
			r = end
		}
		b = b[:w]
	}
	return b
}

// t1ExpandedLen is the length of body after pattern expansion.
func t1ExpandedLen(body []byte) int {
	n := len(body)
	for _, c := range body {
		if c >= 1 && c <= byte(len(t1Patterns)) {
			n += len(t1Patterns[c-1]) - 1
		}
	}
	return n
}

func expandT1Patterns(dst, body []byte) []byte {
	run := 0
	for i, c := range body {
		if c >= 1 && c <= byte(len(t1Patterns)) {
			dst = append(dst, body[run:i]...)
			dst = append(dst, t1Patterns[c-1]...)
			run = i + 1
		}
	}
	return append(dst, body[run:]...)
}

// --- shared helpers ---

// invalidUTF8 returns the offset of the first byte that is not part of a
// valid UTF-8 sequence, or -1.
func invalidUTF8(b []byte) int {
	if utf8.Valid(b) {
		return -1
	}
	for i := 0; i < len(b); {
		if b[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return -1
}

func sizeError(codec, what string, n, limit int) error {
	return newError(codec, ErrLimit, -1, what+" of "+strconv.Itoa(n)+" bytes exceeds "+strconv.Itoa(limit))
}
