package negotiate

import (
	"math"
	"strconv"

	"github.com/m2md/m2md/internal/jsonscan"
)

// JSON output follows serde_json's compact form (wire reference §2.5), so
// that a message m2md writes is byte-identical to what the Rust reference
// would write for the same values: members in declaration order, no
// whitespace, minimal escaping, f32 in shortest form with ".0" on integers.

func appendJSONBool(dst []byte, b bool) []byte {
	if b {
		return append(dst, "true"...)
	}
	return append(dst, "false"...)
}

func appendJSONStrings[S ~string](dst []byte, list []S) []byte {
	dst = append(dst, '[')
	for i, s := range list {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = jsonscan.AppendString(dst, string(s))
	}
	return append(dst, ']')
}

// appendJSONFloat32 writes f the way serde_json writes an f32 (ryu's
// format32 layout): shortest round-trip digits; plain decimal with ".0" on
// integral values for 1e-6 <= |f| < 1e13; otherwise exponent form without
// '+' or leading zeros ("1e-7", "1.5e30"). Non-finite values, which JSON
// cannot carry, are written as null, as serde_json does.
func appendJSONFloat32(dst []byte, f float32) []byte {
	x := float64(f)
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return append(dst, "null"...)
	}
	if math.Signbit(x) {
		dst = append(dst, '-')
		x = -x
	}
	if x == 0 {
		return append(dst, "0.0"...)
	}
	// Shortest digits as d.ddde±XX, then laid out by the decimal exponent.
	var tmp [32]byte
	e := strconv.AppendFloat(tmp[:0], x, 'e', -1, 32)
	var digits [16]byte
	nd := 0
	i := 0
	for ; e[i] != 'e'; i++ {
		if e[i] != '.' {
			digits[nd] = e[i]
			nd++
		}
	}
	exp, _ := strconv.Atoi(string(e[i+1:]))
	d := digits[:nd]
	kk := exp + 1 // 10^(kk-1) <= x < 10^kk
	k := kk - nd
	switch {
	case k >= 0 && kk <= 13:
		dst = append(dst, d...)
		for range k {
			dst = append(dst, '0')
		}
		return append(dst, '.', '0')
	case kk > 0 && kk <= 13:
		dst = append(dst, d[:kk]...)
		dst = append(dst, '.')
		return append(dst, d[kk:]...)
	case kk > -6 && kk <= 0:
		dst = append(dst, '0', '.')
		for range -kk {
			dst = append(dst, '0')
		}
		return append(dst, d...)
	}
	dst = append(dst, d[0])
	if nd > 1 {
		dst = append(dst, '.')
		dst = append(dst, d[1:]...)
	}
	dst = append(dst, 'e')
	return strconv.AppendInt(dst, int64(kk-1), 10)
}
