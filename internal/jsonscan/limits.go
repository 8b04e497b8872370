package jsonscan

// Limits bounds what a scan accepts. A field that is zero or negative takes
// its default, which are the wire reference's §8 values; callers normally
// pass frame.Limits.Effective() field by field.
type Limits struct {
	// MaxDepth bounds the nesting of arrays and objects; a scalar document
	// has depth 0, "[]" depth 1. Default 32. Values above 1024 are clamped,
	// because the scanner recurses once per level.
	MaxDepth int
	// MaxString bounds the bytes of one string or key as written, escapes
	// included, quotes excluded. Default 10 MiB.
	MaxString int
	// MaxArray bounds the elements of one array. Default 10,000.
	MaxArray int
	// MaxMembers bounds the members of one object, in Parse only. Zero or
	// negative: no bound but the input's size (Validate and Scan never
	// bound members).
	MaxMembers int
}

// Defaults applied to zero fields of Limits.
const (
	DefaultMaxDepth  = 32
	DefaultMaxString = 10 << 20
	DefaultMaxArray  = 10_000

	hardMaxDepth = 1024
)

func (l Limits) effective() Limits {
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultMaxDepth
	}
	if l.MaxDepth > hardMaxDepth {
		l.MaxDepth = hardMaxDepth
	}
	if l.MaxString <= 0 {
		l.MaxString = DefaultMaxString
	}
	if l.MaxArray <= 0 {
		l.MaxArray = DefaultMaxArray
	}
	if l.MaxMembers <= 0 {
		l.MaxMembers = -1
	}
	return l
}
