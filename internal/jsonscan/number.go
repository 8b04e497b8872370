package jsonscan

import (
	"math"
	"strconv"
)

// The number reader is a port of serde_json's default number parser (the
// build without the float_roundtrip feature, which the Rust reference uses):
// an integer literal that fits stays an integer (u64, or i64 when
// negative); everything else becomes an f64 computed as significand × or ÷
// a power of ten. That computation is not always correctly rounded for
// significands above 2^53; porting it keeps the f64, and so what the legacy
// T1 codec writes back, identical to the Rust reference's. It also decides,
// as serde does, which numbers are out of range.

// pow10 holds 1e0 … 1e308, each the correctly rounded double, like serde's
// POW10 table of literals.
var pow10 = func() (t [309]float64) {
	for i := range t {
		f, err := strconv.ParseFloat("1e"+strconv.Itoa(i), 64)
		if err != nil {
			panic(err)
		}
		t[i] = f
	}
	return t
}()

// mulAddOverflows is serde's overflow!(sig * 10 + d, u64::MAX).
func mulAddOverflows(sig, d uint64) bool {
	const max = math.MaxUint64
	return sig > max/10 || (sig == max/10 && d > max%10)
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// number scans the number at s.pos and records in s.u64/s.u64ok whether
// it is a u64 in serde_json's sense. In Parse, and where the number may be
// out of range, serdeNumber then reads it again as serde_json does.
func (s *scanner) number() error {
	data := s.data
	start := s.pos
	i := start
	if data[i] == '-' {
		i++
	}
	if i >= len(data) {
		return syntaxErr(i, "unexpected end of input in number")
	}
	var v uint64
	overflow := false
	switch c := data[i]; {
	case c == '0':
		i++
	case '1' <= c && c <= '9':
		for i < len(data) && isDigit(data[i]) {
			d := uint64(data[i] - '0')
			overflow = overflow || mulAddOverflows(v, d)
			v = v*10 + d
			i++
		}
	default:
		return syntaxErr(i, "invalid number")
	}
	integer := true
	if i < len(data) && data[i] == '.' {
		integer = false
		i++
		d := i
		for i < len(data) && isDigit(data[i]) {
			i++
		}
		if i == d {
			return syntaxErr(i, "expected a digit after '.'")
		}
	}
	exp := false
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		integer, exp = false, true
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		d := i
		for i < len(data) && isDigit(data[i]) {
			i++
		}
		if i == d {
			return syntaxErr(i, "expected a digit in exponent")
		}
	}
	s.pos = i
	s.u64, s.u64ok = v, integer && data[start] != '-' && !overflow
	if s.tree == nil && !exp && !overflow {
		return nil // only validating, and only an exponent or a long integer can be out of range
	}
	s.pos = start
	return s.serdeNumber()
}

// serdeNumber reads the number at s.pos, which number has validated, as
// serde_json does: it records in s.num its value as serde_json's as_f64
// gives it and in s.numInt whether serde keeps it as an integer, or refuses
// it as out of range.
func (s *scanner) serdeNumber() error {
	data := s.data
	start := s.pos
	positive := data[s.pos] != '-'
	if !positive {
		s.pos++
	}
	var sig uint64
	if data[s.pos] == '0' {
		s.pos++ // a leading '0' is the whole integer part
	} else {
		for s.pos < len(data) && isDigit(data[s.pos]) {
			d := uint64(data[s.pos] - '0')
			if mulAddOverflows(sig, d) {
				f, ok := s.longInteger(positive, sig)
				return s.float(start, f, ok)
			}
			s.pos++
			sig = sig*10 + d
		}
	}
	if s.pos < len(data) {
		switch data[s.pos] {
		case '.':
			f, ok := s.decimal(positive, sig, 0)
			return s.float(start, f, ok)
		case 'e', 'E':
			f, ok := s.exponent(positive, sig, 0)
			return s.float(start, f, ok)
		}
	}
	s.numInt = true
	if positive {
		s.num = float64(sig)
		return nil
	}
	// Go's signed negation wraps like Rust's wrapping_neg. A non-negative
	// result means the value does not fit i64 (or is -0): serde makes it a float.
	s.num = -float64(sig)
	s.numInt = -int64(sig) < 0
	return nil
}

// float records the value of a number that is not an integer literal;
// !ok means serde_json refuses it as out of range.
func (s *scanner) float(start int, f float64, ok bool) error {
	s.num, s.numInt = f, false
	if !ok {
		return syntaxErr(start, "number out of range")
	}
	return nil
}

// longInteger reads on from an integer part too long for u64: the remaining
// digits only scale the exponent (serde drops them).
func (s *scanner) longInteger(positive bool, sig uint64) (float64, bool) {
	var exponent int32
	for s.pos < len(s.data) && isDigit(s.data[s.pos]) {
		s.pos++
		if exponent < math.MaxInt32 { // serde's i32 would overflow only past 2 GiB of digits
			exponent++
		}
	}
	if s.pos < len(s.data) {
		switch s.data[s.pos] {
		case '.':
			return s.decimal(positive, sig, exponent)
		case 'e', 'E':
			return s.exponent(positive, sig, exponent)
		}
	}
	return f64FromParts(positive, sig, exponent)
}

// decimal reads on from the '.' at s.pos; fraction digits that no longer
// fit u64 are ignored.
func (s *scanner) decimal(positive bool, sig uint64, exp int32) (float64, bool) {
	s.pos++ // '.'
	for s.pos < len(s.data) && isDigit(s.data[s.pos]) {
		d := uint64(s.data[s.pos] - '0')
		s.pos++
		if !mulAddOverflows(sig, d) {
			sig = sig*10 + d
			exp--
		} else {
			for s.pos < len(s.data) && isDigit(s.data[s.pos]) {
				s.pos++
			}
		}
	}
	if s.pos < len(s.data) && (s.data[s.pos] == 'e' || s.data[s.pos] == 'E') {
		return s.exponent(positive, sig, exp)
	}
	return f64FromParts(positive, sig, exp)
}

// exponent reads on from the 'e' or 'E' at s.pos.
func (s *scanner) exponent(positive bool, sig uint64, startingExp int32) (float64, bool) {
	s.pos++ // 'e' or 'E'
	positiveExp := s.data[s.pos] != '-'
	if s.data[s.pos] == '+' || s.data[s.pos] == '-' {
		s.pos++
	}
	var exp int32
	for s.pos < len(s.data) && isDigit(s.data[s.pos]) {
		d := int32(s.data[s.pos] - '0')
		s.pos++
		if exp > math.MaxInt32/10 || (exp == math.MaxInt32/10 && d > math.MaxInt32%10) {
			// serde refuses an infinity and makes anything else zero.
			for s.pos < len(s.data) && isDigit(s.data[s.pos]) {
				s.pos++
			}
			if sig != 0 && positiveExp {
				return 0, false
			}
			if positive {
				return 0, true
			}
			return math.Copysign(0, -1), true
		}
		exp = exp*10 + d
	}
	final := int64(startingExp) - int64(exp)
	if positiveExp {
		final = int64(startingExp) + int64(exp)
	}
	// Rust's saturating_add / saturating_sub on i32.
	final = max(math.MinInt32, min(math.MaxInt32, final))
	return f64FromParts(positive, sig, int32(final))
}

// f64FromParts is serde_json's best-effort (non-float_roundtrip) conversion.
func f64FromParts(positive bool, sig uint64, exponent int32) (float64, bool) {
	f := float64(sig)
	for {
		idx := int64(exponent)
		if idx < 0 {
			idx = -idx
		}
		if idx < int64(len(pow10)) {
			if exponent >= 0 {
				f *= pow10[idx]
				if math.IsInf(f, 0) {
					return 0, false
				}
			} else {
				f /= pow10[idx]
			}
			break
		}
		if f == 0 {
			break
		}
		if exponent >= 0 {
			return 0, false
		}
		f /= 1e308
		exponent += 308
	}
	if !positive {
		f = -f
	}
	return f, true
}
