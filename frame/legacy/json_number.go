package legacy

import (
	"math"
	"strconv"
)

// Number handling is a line-by-line port of serde_json's default number
// parser (the build without the float_roundtrip feature, which is what the
// Rust reference uses): integer literals that fit stay u64/i64, everything
// else becomes an f64 computed as significand × or ÷ a power of ten. That
// computation is not always correctly rounded for significands above 2^53;
// porting it keeps the f64 — and so the re-serialized text — identical.

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

func (p *parser) parseNumber() (node, error) {
	start := p.pos
	positive := true
	if p.src[p.pos] == '-' {
		positive = false
		p.pos++
	}
	if p.pos >= len(p.src) {
		return node{}, p.fail(ErrMalformed, "unexpected end of input inside a number")
	}
	c := p.src[p.pos]
	p.pos++
	var sig uint64
	switch {
	case c == '0':
		// There can be only one leading '0'.
		if p.pos < len(p.src) && isDigit(p.src[p.pos]) {
			return node{}, p.fail(ErrMalformed, "invalid number: leading zero")
		}
	case '1' <= c && c <= '9':
		sig = uint64(c - '0')
		for p.pos < len(p.src) && isDigit(p.src[p.pos]) {
			d := uint64(p.src[p.pos] - '0')
			if mulAddOverflows(sig, d) {
				return p.floatResult(p.parseLongInteger(positive, sig))
			}
			p.pos++
			sig = sig*10 + d
		}
	default:
		p.pos--
		return node{}, p.fail(ErrMalformed, "invalid number")
	}
	if p.pos < len(p.src) {
		switch p.src[p.pos] {
		case '.':
			return p.floatResult(p.parseDecimal(positive, sig, 0))
		case 'e', 'E':
			return p.floatResult(p.parseExponent(positive, sig, 0))
		}
	}
	if positive {
		return node{kind: kindInt, a: uint32(start), b: uint32(p.pos)}, nil
	}
	// Go's signed negation wraps like Rust's wrapping_neg. A non-negative
	// result means the value does not fit i64 (or is -0): serde makes it a float.
	if neg := -int64(sig); neg >= 0 {
		return floatNode(-float64(sig)), nil
	}
	return node{kind: kindInt, a: uint32(start), b: uint32(p.pos)}, nil
}

func (p *parser) floatResult(f float64, err error) (node, error) {
	if err != nil {
		return node{}, err
	}
	return floatNode(f), nil
}

// parseLongInteger handles an integer part too long for u64: the remaining
// digits only scale the exponent (serde drops them).
func (p *parser) parseLongInteger(positive bool, sig uint64) (float64, error) {
	var exponent int32
	for p.pos < len(p.src) {
		switch c := p.src[p.pos]; {
		case isDigit(c):
			p.pos++
			exponent++ // bounded: the input is at most MaxDecompressed bytes
		case c == '.':
			return p.parseDecimal(positive, sig, exponent)
		case c == 'e' || c == 'E':
			return p.parseExponent(positive, sig, exponent)
		default:
			return p.f64FromParts(positive, sig, exponent)
		}
	}
	return p.f64FromParts(positive, sig, exponent)
}

func (p *parser) parseDecimal(positive bool, sig uint64, expBefore int32) (float64, error) {
	p.pos++ // '.'
	var expAfter int32
	for p.pos < len(p.src) && isDigit(p.src[p.pos]) {
		d := uint64(p.src[p.pos] - '0')
		if mulAddOverflows(sig, d) {
			return p.parseDecimalOverflow(positive, sig, expBefore+expAfter)
		}
		p.pos++
		sig = sig*10 + d
		expAfter--
	}
	if expAfter == 0 {
		return 0, p.fail(ErrMalformed, "invalid number: no digit after the decimal point")
	}
	exp := expBefore + expAfter
	if p.pos < len(p.src) && (p.src[p.pos] == 'e' || p.src[p.pos] == 'E') {
		return p.parseExponent(positive, sig, exp)
	}
	return p.f64FromParts(positive, sig, exp)
}

// parseDecimalOverflow ignores fraction digits that no longer fit u64.
func (p *parser) parseDecimalOverflow(positive bool, sig uint64, exp int32) (float64, error) {
	for p.pos < len(p.src) && isDigit(p.src[p.pos]) {
		p.pos++
	}
	if p.pos < len(p.src) && (p.src[p.pos] == 'e' || p.src[p.pos] == 'E') {
		return p.parseExponent(positive, sig, exp)
	}
	return p.f64FromParts(positive, sig, exp)
}

func (p *parser) parseExponent(positive bool, sig uint64, startingExp int32) (float64, error) {
	p.pos++ // 'e' or 'E'
	positiveExp := true
	if p.pos < len(p.src) {
		switch p.src[p.pos] {
		case '+':
			p.pos++
		case '-':
			p.pos++
			positiveExp = false
		}
	}
	if p.pos >= len(p.src) {
		return 0, p.fail(ErrMalformed, "unexpected end of input inside a number exponent")
	}
	c := p.src[p.pos]
	p.pos++
	if !isDigit(c) {
		p.pos--
		return 0, p.fail(ErrMalformed, "invalid number: no digit in the exponent")
	}
	exp := int32(c - '0')
	for p.pos < len(p.src) && isDigit(p.src[p.pos]) {
		d := int32(p.src[p.pos] - '0')
		p.pos++
		if exp > math.MaxInt32/10 || (exp == math.MaxInt32/10 && d > math.MaxInt32%10) {
			return p.parseExponentOverflow(positive, sig == 0, positiveExp)
		}
		exp = exp*10 + d
	}
	var final int64
	if positiveExp {
		final = int64(startingExp) + int64(exp)
	} else {
		final = int64(startingExp) - int64(exp)
	}
	// Rust's saturating_add / saturating_sub on i32.
	final = max(math.MinInt32, min(math.MaxInt32, final))
	return p.f64FromParts(positive, sig, int32(final))
}

func (p *parser) parseExponentOverflow(positive, zeroSig, positiveExp bool) (float64, error) {
	// serde errors instead of producing an infinity.
	if !zeroSig && positiveExp {
		return 0, p.fail(ErrMalformed, "number out of range")
	}
	for p.pos < len(p.src) && isDigit(p.src[p.pos]) {
		p.pos++
	}
	if positive {
		return 0, nil
	}
	return math.Copysign(0, -1), nil
}

// f64FromParts is serde_json's best-effort (non-float_roundtrip) conversion.
func (p *parser) f64FromParts(positive bool, sig uint64, exponent int32) (float64, error) {
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
					return 0, p.fail(ErrMalformed, "number out of range")
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
			return 0, p.fail(ErrMalformed, "number out of range")
		}
		f /= 1e308
		exponent += 308
	}
	if !positive {
		f = -f
	}
	return f, nil
}

// numberAsF64 is serde_json's Number::as_f64 for a parsed number node.
func (p *parser) numberAsF64(n node) float64 {
	if n.kind == kindFloat {
		return n.float()
	}
	lit := p.src[n.a:n.b]
	if lit[0] == '-' {
		v, _ := strconv.ParseInt(string(lit), 10, 64)
		return float64(v)
	}
	v, _ := strconv.ParseUint(string(lit), 10, 64)
	return float64(v)
}

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
