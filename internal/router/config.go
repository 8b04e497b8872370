package router

// Config bounds the router's tables. The zero value is a working default.
type Config struct {
	// MaxRequests bounds the requests one session may have outstanding as a
	// requester; one more is refused with ErrTooManyRequests. Zero or less
	// means DefaultMaxRequests; at most MaxLimit.
	MaxRequests int
	// MaxDeliveries bounds the deliveries one session may have outstanding
	// as a provider (sent to it, END not yet received); a provider at the
	// cap is not chosen by model and an addressed request to it is refused
	// with ErrProviderBusy. Zero or less means DefaultMaxDeliveries; at most
	// MaxLimit.
	MaxDeliveries int
}

const (
	// DefaultMaxRequests is Config.MaxRequests's default.
	DefaultMaxRequests = 1024
	// DefaultMaxDeliveries is Config.MaxDeliveries's default.
	DefaultMaxDeliveries = 1024
	// MaxLimit is the largest accepted value of either cap: delivery ids
	// hold a slot index in their low bits, and more than a million
	// concurrent requests per session is a misconfiguration.
	MaxLimit = 1 << 20
)

func (c Config) effective() Config {
	return Config{
		MaxRequests:   clampLimit(c.MaxRequests, DefaultMaxRequests),
		MaxDeliveries: clampLimit(c.MaxDeliveries, DefaultMaxDeliveries),
	}
}

func clampLimit(v, def int) int {
	switch {
	case v <= 0:
		return def
	case v > MaxLimit:
		return MaxLimit
	}
	return v
}
