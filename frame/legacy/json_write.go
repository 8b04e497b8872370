package legacy

import (
	"math"
	"strconv"
)

// appendFloat formats a finite f64 the way serde_json 1.0.149 writes it.
// That version formats with zmij, whose output is ryu's layout with an
// explicit sign on every exponent: the shortest digits that round-trip,
// plain notation with a ".0" on integral values when the decimal exponent is
// in [-5, 15] (1.0, 0.00001, 1000000000000000.0), otherwise d.ddde±x
// (1e+16, 1.5e+300, 1e-6). serde_json up to 1.0.146 used ryu, which writes
// no '+' (1e16); see zmij's tests/ryu_comparison.rs.
func appendFloat(dst []byte, f float64) []byte {
	if f == 0 {
		if math.Signbit(f) {
			return append(dst, "-0.0"...)
		}
		return append(dst, "0.0"...)
	}
	var tmp [32]byte
	// strconv's shortest form is Ryū's: "d.ddddde±XX".
	s := strconv.AppendFloat(tmp[:0], f, 'e', -1, 64)
	if s[0] == '-' {
		dst = append(dst, '-')
		s = s[1:]
	}
	var digits [17]byte
	n := 0
	i := 0
	for ; s[i] != 'e'; i++ {
		if s[i] != '.' {
			digits[n] = s[i]
			n++
		}
	}
	e, _ := strconv.Atoi(string(s[i+1:]))
	d := digits[:n]
	length := n
	kk := e + 1      // 10^(kk-1) <= |f| < 10^kk
	k := kk - length // |f| = digits × 10^k
	switch {
	case 0 <= k && kk <= 16: // 1234e7 -> 12340000000.0
		dst = append(dst, d...)
		for j := length; j < kk; j++ {
			dst = append(dst, '0')
		}
		return append(dst, '.', '0')
	case 0 < kk && kk <= 16: // 1234e-2 -> 12.34
		dst = append(dst, d[:kk]...)
		dst = append(dst, '.')
		return append(dst, d[kk:]...)
	case -5 < kk && kk <= 0: // 1234e-6 -> 0.001234
		dst = append(dst, '0', '.')
		for j := kk; j < 0; j++ {
			dst = append(dst, '0')
		}
		return append(dst, d...)
	default: // 1e30 -> 1e+30, 1234e30 -> 1.234e+33
		dst = append(dst, d[0])
		if length > 1 {
			dst = append(dst, '.')
			dst = append(dst, d[1:]...)
		}
		dst = append(dst, 'e')
		if kk-1 >= 0 {
			dst = append(dst, '+')
		}
		return strconv.AppendInt(dst, int64(kk-1), 10)
	}
}
