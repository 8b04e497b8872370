package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// getMetrics is the /metrics text of the admin endpoint at addr.
func getMetrics(t testing.TB, addr string) string {
	t.Helper()
	m, err := tryMetrics(addr)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// tryMetrics is getMetrics for a daemon that may not listen yet.
func tryMetrics(addr string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("GET /metrics: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET /metrics: HTTP %d, %v", resp.StatusCode, err)
	}
	return string(body), nil
}
