package bench

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"
)

// Payload is one JSON document the benchmarks send or encode.
type Payload struct {
	// Name is the file name (relative to the corpus folder) or the
	// built-in sample's name.
	Name string
	// JSON is the document, byte for byte as it goes on the wire.
	JSON []byte
}

// Built-in payload sizes for BuiltinPayload.
const (
	Size256B = "256B"
	Size1KB  = "1KB"
	Size16KB = "16KB"
)

// BuiltinSizes lists the names BuiltinPayload accepts.
func BuiltinSizes() []string { return []string{Size256B, Size1KB, Size16KB} }

// samples are real corpus requests (testdata/corpus) whose last message is
// cut or extended to an exact size, so the load benchmark ships its own
// realistic payloads and needs no corpus folder.
//
//go:embed samples/*.json
var samples embed.FS

var builtin = map[string]struct {
	file string
	size int
}{
	Size256B: {"samples/req-chat-tiny-02.json", 256},
	Size1KB:  {"samples/req-chat-1k-01.json", 1024},
	Size16KB: {"samples/req-multiturn-16k-01.json", 16384},
}

// ErrPayload reports a payload that cannot be used: an unknown built-in
// size, an empty or unreadable corpus folder, a file that is not JSON.
var ErrPayload = errors.New("bench: bad payload")

// BuiltinPayload returns the built-in sample of the named size (Size256B,
// Size1KB, Size16KB; case does not matter): a real chat request from the
// corpus whose last message content is shortened or extended so that the
// document is exactly that many bytes.
func BuiltinPayload(size string) (Payload, error) {
	for name, b := range builtin {
		if !strings.EqualFold(name, size) {
			continue
		}
		doc, err := samples.ReadFile(b.file)
		if err != nil {
			return Payload{}, fmt.Errorf("%w: %v", ErrPayload, err)
		}
		out, err := resizeLastContent(doc, b.size)
		if err != nil {
			return Payload{}, fmt.Errorf("%w: sample %s: %v", ErrPayload, name, err)
		}
		return Payload{Name: name, JSON: out}, nil
	}
	return Payload{}, fmt.Errorf("%w: unknown size %q (want one of %s)", ErrPayload, size, strings.Join(BuiltinSizes(), ", "))
}

// LoadCorpus reads every *.json file under dir (recursively), sorted by
// path. Each file must be one valid JSON document; it is used as it is.
func LoadCorpus(dir string) ([]Payload, error) {
	var out []Payload
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(d.Name(), ".json") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !json.Valid(b) {
			return fmt.Errorf("%w: %s is not valid JSON", ErrPayload, path)
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			rel = path
		}
		out = append(out, Payload{Name: filepath.ToSlash(rel), JSON: b})
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrPayload) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: corpus %s: %v", ErrPayload, dir, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no *.json files in %s", ErrPayload, dir)
	}
	slices.SortFunc(out, func(a, b Payload) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// resizeLastContent rewrites the last "content" string of doc so that the
// whole document is exactly size bytes. The rest of the document stays
// byte for byte; the new content is the old one cut at a character
// boundary, or the old one followed by itself again, padded with spaces to
// the exact size.
func resizeLastContent(doc []byte, size int) ([]byte, error) {
	const key = `"content":"`
	at := bytes.LastIndex(doc, []byte(key))
	if at < 0 {
		return nil, errors.New("no content string")
	}
	start := at + len(key) - 1 // the opening quote
	end, err := stringEnd(doc, start)
	if err != nil {
		return nil, err
	}
	var content string
	if err := json.Unmarshal(doc[start:end], &content); err != nil {
		return nil, err
	}
	budget := size - (len(doc) - (end - start)) - 2 // room for the escaped characters
	if budget < 0 {
		return nil, fmt.Errorf("document without content is already %d bytes", len(doc)-(end-start))
	}
	source := content
	for len(source) < size {
		source += "\n\n" + content
	}
	var body []byte
	for _, r := range source {
		enc := escapeRune(r)
		if len(body)+len(enc) > budget {
			break
		}
		body = append(body, enc...)
	}
	for len(body) < budget {
		body = append(body, ' ')
	}
	out := make([]byte, 0, size)
	out = append(out, doc[:start]...)
	out = append(out, '"')
	out = append(out, body...)
	out = append(out, '"')
	out = append(out, doc[end:]...)
	if len(out) != size || !json.Valid(out) {
		return nil, fmt.Errorf("resized document is %d bytes (valid %v), want %d", len(out), json.Valid(out), size)
	}
	return out, nil
}

// stringEnd returns the offset just past the JSON string that starts with
// the quote at doc[start].
func stringEnd(doc []byte, start int) (int, error) {
	for i := start + 1; i < len(doc); i++ {
		switch doc[i] {
		case '\\':
			i++
		case '"':
			return i + 1, nil
		}
	}
	return 0, errors.New("unterminated string")
}

// escapeRune returns r as it appears inside a JSON string: raw UTF-8 as the
// corpus writes it, with the escapes JSON requires.
func escapeRune(r rune) []byte {
	switch r {
	case '"':
		return []byte(`\"`)
	case '\\':
		return []byte(`\\`)
	case '\n':
		return []byte(`\n`)
	case '\t':
		return []byte(`\t`)
	case '\r':
		return []byte(`\r`)
	}
	if r < 0x20 {
		return fmt.Appendf(nil, `\u%04x`, r)
	}
	return utf8.AppendRune(nil, r)
}

// replaceModel returns doc with its top-level "model" string replaced by
// model; ok is false when doc has none. Everything else stays byte for
// byte.
func replaceModel(doc []byte, model string) ([]byte, bool) {
	start, end, ok := topLevelScalar(doc, "model")
	if !ok || doc[start] != '"' {
		return nil, false
	}
	enc, _ := json.Marshal(model)
	return spliceValue(doc, start, end, enc), true
}

// spliceValue returns doc with doc[start:end] replaced by val.
func spliceValue(doc []byte, start, end int, val []byte) []byte {
	out := make([]byte, 0, len(doc)-(end-start)+len(val))
	out = append(out, doc[:start]...)
	out = append(out, val...)
	return append(out, doc[end:]...)
}

// topLevelScalar finds the value of the top-level key of the JSON object
// doc when it is a scalar (string, number, boolean or null): its bytes are
// doc[start:end]. ok is false when doc is no object, has no such key, or
// its value is an object or array.
func topLevelScalar(doc []byte, key string) (start, end int, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	depth := 0
	expectKey := false
	for {
		tok, err := dec.Token()
		if err != nil {
			return 0, 0, false
		}
		switch t := tok.(type) {
		case json.Delim:
			if t == '{' || t == '[' {
				depth++
				expectKey = t == '{' && depth == 1
			} else {
				depth--
				expectKey = depth == 1
			}
			continue
		case string:
			if depth == 1 && expectKey {
				if t != key {
					expectKey = false
					continue
				}
				after := int(dec.InputOffset())
				val, err := dec.Token()
				if err != nil {
					return 0, 0, false
				}
				if _, isDelim := val.(json.Delim); isDelim {
					return 0, 0, false
				}
				end := int(dec.InputOffset())
				// The value starts after the colon and any spaces.
				start := after + bytes.IndexFunc(doc[after:end], func(r rune) bool {
					return r != ':' && r != ' ' && r != '\t' && r != '\r' && r != '\n'
				})
				return start, end, true
			}
		}
		if depth == 1 {
			expectKey = !expectKey
		}
	}
}
