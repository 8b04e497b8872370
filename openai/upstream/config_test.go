package upstream

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/m2md/m2md/internal/testkit"
)

// TestConfigRefused: a Config that cannot work is a ConfigError naming the
// field to change; zero takes the default and a negative number is an
// error, as in every Config of m2md.
func TestConfigRefused(t *testing.T) {
	const base = "http://127.0.0.1:9/v1"
	for _, tc := range []struct {
		name  string
		cfg   Config
		field string
	}{
		{"ftp base URL", Config{BaseURL: "ftp://x"}, "upstream.Config.BaseURL"},
		{"no base URL", Config{}, "upstream.Config.BaseURL"},
		{"negative concurrency", Config{BaseURL: base, Concurrency: -1}, "upstream.Config.Concurrency"},
		{"negative max response", Config{BaseURL: base, MaxResponse: -1}, "upstream.Config.MaxResponse"},
		{"negative first byte timeout", Config{BaseURL: base, FirstByteTimeout: -time.Second}, "upstream.Config.FirstByteTimeout"},
		{"negative chunk timeout", Config{BaseURL: base, ChunkTimeout: -time.Second}, "upstream.Config.ChunkTimeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up, err := New(tc.cfg)
			if err == nil {
				up.Close()
			}
			testkit.WantConfigError(t, err, tc.field, tc.field)
		})
	}
	up, err := New(Config{BaseURL: base})
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	if up.cfg.Concurrency != DefaultConcurrency || up.cfg.MaxResponse != DefaultMaxResponse ||
		up.cfg.FirstByteTimeout != DefaultFirstByteTimeout || up.cfg.ChunkTimeout != DefaultChunkTimeout {
		t.Errorf("zero values: %+v, want the defaults", up.cfg)
	}
}

// TestModelsNoneListed: a server whose GET /models lists nothing leaves
// the agent nothing to serve: a ConfigError naming Config.Models.
func TestModelsNoneListed(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"object":"list","data":[]}`))
	}))
	defer srv.Close()
	up, err := New(Config{BaseURL: srv.URL + "/v1"})
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	_, err = up.Models(context.Background())
	testkit.WantConfigError(t, err, "upstream.Config.Models", "lists no model")
}
