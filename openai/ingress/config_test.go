package ingress

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/internal/testkit"
)

// TestConfigRefused: a Config New cannot work with is a ConfigError naming
// the field to change, found before any session is dialed; a negative
// number outside Limits is an error, as in every Config of m2md.
func TestConfigRefused(t *testing.T) {
	dialed := false
	base := Config{
		Dial: func(context.Context, Identity) (*client.Client, error) {
			dialed = true
			return nil, errors.New("no daemon in this test")
		},
		Models: func(string) []string { return nil },
	}
	for _, tc := range []struct {
		name  string
		set   func(*Config)
		field string
		want  string
	}{
		{"negative max body", func(c *Config) { c.MaxBody = -1 }, "ingress.Config.MaxBody", "ingress.Config.MaxBody is -1"},
		{"negative timeout", func(c *Config) { c.Timeout = -time.Second }, "ingress.Config.Timeout", "ingress.Config.Timeout is -1s"},
		{"body budget below one body", func(c *Config) { c.MaxBody, c.Limits.MaxBodyBytes = 1<<20, 1<<10 },
			"ingress.Limits.MaxBodyBytes", "below ingress.Config.MaxBody"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			tc.set(&cfg)
			in, err := New(t.Context(), cfg)
			if err == nil {
				in.Close()
			}
			testkit.WantConfigError(t, err, tc.field, tc.want)
		})
	}
	if dialed {
		t.Error("a session was dialed for a Config refused")
	}
}
