package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/rs/zerolog"

	"github.com/m2md/m2md/client"
	"github.com/m2md/m2md/daemon"
	"github.com/m2md/m2md/internal/daemontest"
	"github.com/m2md/m2md/openai/ingress"
)

// status is the HTTP status of an SDK call's error (200 without one).
func status(t *testing.T, err error) int {
	t.Helper()
	if err == nil {
		return 200
	}
	var ae *openai.Error
	if !errors.As(err, &ae) {
		t.Fatalf("not an API error: %v", err)
	}
	return ae.StatusCode
}

// The keys file reloads on SIGHUP and on change, with a request in flight
// and its connection open: the request completes, each key's use so far
// counts under its new limits, and a file with an error is refused whole
// (logged) while the keys in use stay.
func TestServeOpenAIKeysReload(t *testing.T) {
	d := daemontest.Start(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	release, entered := make(chan struct{}), make(chan struct{}, 1)
	prov, err := client.Dial(ctx, d.URL("ws"), client.Options{AgentID: "slow-provider", Models: []string{"slow"},
		Handler: client.HandlerFunc(func(ctx context.Context, _ *client.Request, w client.ResponseWriter) {
			entered <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
			}
			w.Respond([]byte(`{"id":"c","object":"chat.completion","model":"slow","choices":[]}`))
		})})
	if err != nil {
		t.Fatal(err)
	}
	defer prov.Close()

	path := filepath.Join(t.TempDir(), "keys")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("sk-alice-0000001 alice rpm=2\n")
	keys, err := loadOpenAIKeys(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	log := zerolog.New(&logs)
	e, err := startOpenAI(ctx, d.Server, daemon.Config{WSPath: daemon.DefaultWSPath}, "127.0.0.1:0", keys, ingress.Limits{}, client.DefaultConversationHistory, log)
	if err != nil {
		t.Fatal(err)
	}
	defer e.stop(time.Second)
	e.watchKeys(path, nil, log)
	sdk := func(key string) openai.Client {
		return openai.NewClient(option.WithBaseURL("http://"+e.Addr().String()+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
	}
	alice := sdk("sk-alice-0000001")
	ask := func(c openai.Client, model string) int {
		_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: model,
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
		return status(t, err)
	}

	// A request in flight, then alice over her 2 a minute.
	inFlight := make(chan int, 1)
	go func() { inFlight <- ask(alice, "slow") }()
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the first request did not reach the provider")
	}
	if got := ask(alice, "nobody-serves-this"); got != 404 {
		t.Fatalf("second request: HTTP %d", got)
	}
	if got := ask(alice, "nobody-serves-this"); got != 429 {
		t.Fatalf("over rpm=2: HTTP %d", got)
	}

	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !ok(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 20 s; log:\n%s", what, logs.String())
			}
		}
	}
	// SIGHUP: alice's new limit holds at once.
	write("sk-alice-0000001 alice rpm=100\n")
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitFor("reload on SIGHUP", func() bool { return ask(alice, "nobody-serves-this") == 404 })
	close(release)
	select {
	case got := <-inFlight:
		if got != 200 {
			t.Fatalf("the request in flight during the reload: HTTP %d", got)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the request in flight during the reload did not complete")
	}

	// A file with an error: refused whole, logged, the old keys stay.
	write("sk-alice-0000001 alice rpm=100\nsk-bob-00000001 bob rpm=lots\n")
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitFor("a broken file logged", func() bool { return strings.Contains(logs.String(), "not reloaded") })
	if got := ask(alice, "nobody-serves-this"); got != 404 {
		t.Fatalf("alice after a broken file: HTTP %d", got)
	}
	if got := ask(sdk("sk-bob-00000001"), "nobody-serves-this"); got != 401 {
		t.Fatalf("bob of a broken file: HTTP %d", got)
	}
	if strings.Contains(logs.String(), "sk-") {
		t.Fatalf("a key in the log:\n%s", logs.String())
	}

	// A change without a signal is picked up too: bob's key works and
	// alice's is revoked.
	write("sk-bob-00000001 bob\n")
	waitFor("reload on change", func() bool { return ask(sdk("sk-bob-00000001"), "nobody-serves-this") == 404 })
	if got := ask(alice, "nobody-serves-this"); got != 401 {
		t.Fatalf("a revoked key: HTTP %d", got)
	}
}
