package legacy

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// An independent model of the Rust TokenCodec over encoding/json values,
// used to check the node-table implementation on real documents. It shares
// no code with the package except the abbreviation tables.

func modelParse(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys) // Go string order is UTF-8 byte order, like BTreeMap<String, _>
	return keys
}

func modelIsDefault(key string, v any) bool {
	switch key {
	case "temperature", "T", "top_p", "p":
		if n, ok := v.(json.Number); ok {
			f, _ := n.Float64()
			return math.Abs(f-1) < 0.001
		}
	case "n":
		n, ok := v.(json.Number)
		return ok && n.String() == "1"
	case "stream", "s":
		return v == false
	case "frequency_penalty", "f", "presence_penalty", "P":
		if n, ok := v.(json.Number); ok {
			f, _ := n.Float64()
			return f == 0
		}
	case "logit_bias", "lb":
		m, ok := v.(map[string]any)
		return ok && len(m) == 0
	}
	return false
}

func modelMapString(v any, ctx string, roles, models map[string][]byte) any {
	s, ok := v.(string)
	if !ok {
		return v
	}
	if ctx == "role" || ctx == "r" {
		if r, ok := roles[s]; ok {
			return string(r)
		}
	}
	if ctx == "model" || ctx == "M" {
		if m, ok := models[s]; ok {
			return string(m)
		}
	}
	return v
}

func modelCompress(v any, ctx string) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for _, k := range sortedKeys(x) {
			val := x[k]
			if val == nil || modelIsDefault(k, val) {
				continue
			}
			nk := k
			if a, ok := t1KeyAbbrev[k]; ok {
				nk = string(a)
			}
			out[nk] = modelCompress(val, k)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = modelCompress(e, ctx)
		}
		return out
	default:
		return modelMapString(v, ctx, t1RoleAbbrev, t1ModelAbbrev)
	}
}

func modelExpand(v any, ctx string) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for _, k := range sortedKeys(x) {
			nk := k
			if full, ok := t1KeyExpand[k]; ok {
				nk = string(full)
			}
			out[nk] = modelExpand(x[k], nk)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = modelExpand(e, ctx)
		}
		return out
	default:
		return modelMapString(v, ctx, t1RoleExpand, t1ModelExpand)
	}
}

func modelRestore(v any) any {
	switch x := v.(type) {
	case map[string]any:
		_, hasMessages := x["messages"]
		_, hasModel := x["model"]
		if hasMessages || hasModel {
			defaults := map[string]any{
				"temperature": json.Number("1.0"), "top_p": json.Number("1.0"), "n": json.Number("1"),
				"stream": false, "frequency_penalty": json.Number("0"), "presence_penalty": json.Number("0"),
			}
			for k, d := range defaults {
				if _, ok := x[k]; !ok {
					x[k] = d
				}
			}
			return x
		}
		for k, e := range x {
			x[k] = modelRestore(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = modelRestore(e)
		}
		return x
	default:
		return v
	}
}

// modelWrite serializes like serde_json's compact writer, formulated
// differently from the package (strconv 'f' formatting, rune-wise escaping).
func modelWrite(sb *strings.Builder, v any) {
	switch x := v.(type) {
	case nil:
		sb.WriteString("null")
	case bool:
		sb.WriteString(strconv.FormatBool(x))
	case json.Number:
		sb.WriteString(modelNumber(string(x)))
	case string:
		sb.WriteByte('"')
		for _, r := range x {
			switch {
			case r == '"':
				sb.WriteString(`\"`)
			case r == '\\':
				sb.WriteString(`\\`)
			case r == '\b':
				sb.WriteString(`\b`)
			case r == '\f':
				sb.WriteString(`\f`)
			case r == '\n':
				sb.WriteString(`\n`)
			case r == '\r':
				sb.WriteString(`\r`)
			case r == '\t':
				sb.WriteString(`\t`)
			case r < 0x20:
				sb.WriteString(`\u00`)
				sb.WriteString(strconv.FormatInt(int64(r>>4), 16))
				sb.WriteString(strconv.FormatInt(int64(r&15), 16))
			default:
				sb.WriteRune(r)
			}
		}
		sb.WriteByte('"')
	case []any:
		sb.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				sb.WriteByte(',')
			}
			modelWrite(sb, e)
		}
		sb.WriteByte(']')
	case map[string]any:
		sb.WriteByte('{')
		for i, k := range sortedKeys(x) {
			if i > 0 {
				sb.WriteByte(',')
			}
			modelWrite(sb, k)
			sb.WriteByte(':')
			modelWrite(sb, x[k])
		}
		sb.WriteByte('}')
	}
}

// modelNumber re-spells a JSON number literal as serde_json would write it,
// for literals whose float value serde computes exactly (at most 15
// significant digits, which holds for the corpus).
func modelNumber(lit string) string {
	if !strings.ContainsAny(lit, ".eE") {
		if _, err := strconv.ParseUint(lit, 10, 64); err == nil {
			return lit
		}
		if i, err := strconv.ParseInt(lit, 10, 64); err == nil && i != 0 {
			return lit
		}
	}
	f, _ := strconv.ParseFloat(lit, 64)
	if f == 0 {
		if math.Signbit(f) {
			return "-0.0"
		}
		return "0.0"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64)
	mant, exp, _ := strings.Cut(e, "e")
	x, _ := strconv.Atoi(exp)
	if -5 <= x && x <= 15 {
		s := strconv.FormatFloat(f, 'f', -1, 64)
		if !strings.Contains(s, ".") {
			s += ".0"
		}
		return s
	}
	sign := "+" // serde_json 1.0.149 (zmij) signs every exponent
	if x < 0 {
		sign = "-"
		x = -x
	}
	return mant + "e" + sign + strconv.Itoa(x)
}

// modelT1RoundTrip is what DecodeT1(EncodeT1(doc)) must produce.
func modelT1RoundTrip(doc []byte) (string, error) {
	v, err := modelParse(doc)
	if err != nil {
		return "", err
	}
	var sb strings.Builder
	modelWrite(&sb, modelRestore(modelExpand(modelCompress(v, ""), "")))
	return sb.String(), nil
}

// modelNormalize is serde_json's compact re-serialization of doc.
func modelNormalize(doc []byte) (string, error) {
	v, err := modelParse(doc)
	if err != nil {
		return "", err
	}
	var sb strings.Builder
	modelWrite(&sb, v)
	if !utf8.ValidString(sb.String()) {
		panic("model wrote invalid UTF-8")
	}
	return sb.String(), nil
}
