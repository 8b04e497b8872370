package jsonscan

import "testing"

func TestAppendString(t *testing.T) {
	var all []byte
	for c := 0; c < 0x80; c++ {
		all = append(all, byte(c))
	}
	all = append(all, "é\u2028\u2029😀"...)
	for _, tc := range []struct{ in, want string }{
		{string(all), `"\u0000\u0001\u0002\u0003\u0004\u0005\u0006\u0007\b\t\n\u000b\f\r\u000e\u000f` +
			`\u0010\u0011\u0012\u0013\u0014\u0015\u0016\u0017\u0018\u0019\u001a\u001b\u001c\u001d\u001e\u001f` +
			` !\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_` + "`" +
			"abcdefghijklmnopqrstuvwxyz{|}~\x7fé\u2028\u2029😀\""},
		{"", `""`},
		{"a\xffb", "\"a\ufffdb\""},
		{"\xe2\x82", "\"\ufffd\ufffd\""},             // a truncated sequence: each byte replaced
		{"x\xed\xa0\x80", "\"x\ufffd\ufffd\ufffd\""}, // an encoded surrogate is not UTF-8
	} {
		if got := string(AppendString([]byte("keep"), tc.in)); got != "keep"+tc.want {
			t.Errorf("AppendString(%q) = %s, want %s", tc.in, got, tc.want)
		}
		if got := string(AppendString(nil, []byte(tc.in))); got != tc.want {
			t.Errorf("AppendString([]byte %q) = %s, want %s", tc.in, got, tc.want)
		}
		var d Doc
		if _, err := d.Parse([]byte(tc.want), Limits{}); err != nil {
			t.Errorf("AppendString(%q) wrote invalid JSON: %v", tc.in, err)
		}
	}
}
