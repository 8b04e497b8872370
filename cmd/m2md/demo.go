package main

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/dustin/go-humanize/english"

	"github.com/m2md/m2md/certs"
	"github.com/m2md/m2md/client"
)

// The demo: one terminal runs `m2md serve`, a second `m2md demo provider`
// (an agent serving the corpus's models with canned answers), a third
// `m2md demo requester` (an agent sending the corpus's requests to whoever
// serves their model), which prints what each request cost on the wire.

const demoUsage = `Usage: m2md demo <provider|requester> [flags]

Two agents to try the daemon with, each in its own terminal next to 'm2md serve':

  provider   serves the corpus's models with canned chat completions
  requester  sends every request of testdata/corpus to whoever serves its model
             and prints what each cost on the wire

Run 'm2md demo provider --help' or 'm2md demo requester --help' for the flags.
`

func runDemo(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, demoUsage)
		return usagef("demo needs a role: provider or requester")
	}
	switch args[0] {
	case "provider":
		return runDemoProvider(args[1:], stdout, stderr)
	case "requester":
		return runDemoRequester(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		return helpError{demoUsage}
	}
	return usagef("demo role must be provider or requester, not %q (run 'm2md demo --help')", args[0])
}

func certFingerprint(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return "", errors.New("no PEM block")
	}
	if _, err := x509.ParseCertificate(blk.Bytes); err != nil {
		return "", err
	}
	return certs.Fingerprint(blk.Bytes), nil
}

// demoModels are the models the corpus's requests name.
var demoModels = []string{
	"gpt-4o", "gpt-4o-mini", "gpt-4-turbo", "gpt-3.5-turbo", "o1", "o1-mini", "o3-mini",
	"claude-3-5-sonnet", "meta-llama/llama-3.1-8b", "meta-llama/llama-3.3-70b",
	"mistralai/mistral-large", "mistralai/mixtral-8x7b", "text-embedding-3-small", "text-embedding-3-large",
}

func runDemoProvider(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo provider", "demo provider [flags]\n\nServes the corpus's models with canned chat completions (streamed when asked).", stderr)
	af := registerAgentFlags(fs, "demo-provider", "info")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	opt, err := af.options()
	if err != nil {
		return err
	}
	// Losing the daemon and finding it again are logged on stderr.
	if opt.Logger, err = af.log.logger(stderr); err != nil {
		return err
	}
	opt.Models, opt.Reconnect, opt.WaitForDaemon = demoModels, true, true
	agent := opt.AgentID
	opt.Handler = client.HandlerFunc(func(ctx context.Context, req *client.Request, w client.ResponseWriter) {
		answer := fmt.Sprintf("This is %s answering a %d-byte request for %s from %s.", agent, len(req.Body), req.Model, req.From)
		if req.Stream {
			for i, word := range strings.Fields(answer) {
				if err := w.Chunk(demoChunk(req.Model, i, word+" ")); err != nil {
					return
				}
			}
		}
		_ = w.Respond(demoCompletion(req.Model, answer, len(req.Body)/4))
	})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := client.Dial(ctx, af.url, opt)
	if err != nil {
		return af.dialError(err)
	}
	defer c.Close()
	s := c.Session()
	fmt.Fprintf(stdout, "provider %s connected over %s (session %s, security %s), serving %s; Ctrl-C to stop\n",
		s.AgentID, s.Transport, s.ID, s.Params.SecurityMode, english.Plural(len(demoModels), "model", "models"))
	select {
	case <-ctx.Done():
	case <-c.Done():
		return agentEnded(c.Err(), agent)
	}
	st := c.Stats()
	fmt.Fprintf(stdout, "served %s; received %d wire bytes for %d JSON bytes (%.2fx)\n",
		english.Plural(int(st.Deliveries), "request", "requests"), st.WireBytesReceived, st.JSONBytesReceived, st.ReceiveRatio())
	return nil
}

func demoCompletion(model, text string, promptTokens int) []byte {
	b, _ := json.Marshal(map[string]any{
		"id": fmt.Sprintf("chatcmpl-demo%d", time.Now().UnixNano()), "object": "chat.completion",
		"created": time.Now().Unix(), "model": model,
		"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": text}, "finish_reason": "stop"}},
		"usage":   map[string]any{"prompt_tokens": promptTokens, "completion_tokens": len(strings.Fields(text)), "total_tokens": promptTokens + len(strings.Fields(text))},
	})
	return b
}

func demoChunk(model string, i int, word string) []byte {
	b, _ := json.Marshal(map[string]any{
		"id": "chatcmpl-demo", "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": model,
		"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": word}, "finish_reason": nil}},
	})
	return b
}

func runDemoRequester(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo requester", `demo requester [flags]

Sends every request of a corpus folder to whoever serves its model and prints,
per request, the JSON size, the bytes on the wire (DATA header + frame), their
ratio, the round-trip time, and (after the arrow) the agent that answered with
the size of its answer. Exits 1 when every request failed.`, stderr)
	af := registerAgentFlags(fs, "demo-requester", "warn")
	dir := fs.String("corpus", filepath.Join("testdata", "corpus"), "`folder` of JSON requests (req-*.json)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	opt, err := af.options()
	if err != nil {
		return err
	}
	if opt.Logger, err = af.log.logger(stderr); err != nil {
		return err
	}
	files, _ := filepath.Glob(filepath.Join(*dir, "req-*.json"))
	sort.Strings(files)
	if len(files) == 0 {
		return fmt.Errorf("no req-*.json in %s (set --corpus)", *dir)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	c, err := client.Dial(dctx, af.url, opt)
	cancel()
	if err != nil {
		return af.dialError(err)
	}
	defer c.Close()
	s := c.Session()
	fmt.Fprintf(stdout, "requester %s connected over %s, security %s\n\n", s.AgentID, s.Transport, s.Params.SecurityMode)
	fmt.Fprintf(stdout, "%-28s %-26s %9s %9s %7s %9s   %s\n", "request", "model", "JSON B", "wire B", "ratio", "latency", "← answered by (answer size)")
	failed := 0
	for _, f := range files {
		if ctx.Err() != nil {
			break
		}
		body, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		before := c.Stats()
		start := time.Now()
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := c.Do(rctx, body)
		cancel()
		if err != nil {
			failed++
			fmt.Fprintf(stdout, "%-28s error: %v\n", filepath.Base(f), err)
			continue
		}
		after := c.Stats()
		wire := after.WireBytesSent - before.WireBytesSent
		var model struct{ Model string }
		_ = json.Unmarshal(body, &model)
		fmt.Fprintf(stdout, "%-28s %-26s %9d %9d %6.2fx %9s   ← %s (%d B)\n", filepath.Base(f), model.Model, len(body), wire,
			float64(len(body))/float64(max(wire, 1)), time.Since(start).Round(10*time.Microsecond), resp.From, len(resp.Body))
	}
	st := c.Stats()
	fmt.Fprintf(stdout, "\n%d of %s answered, %d failed\n", len(files)-failed, english.Plural(len(files), "request", "requests"), failed)
	fmt.Fprintf(stdout, "sent %d JSON bytes as %d wire bytes (%.2fx); received %d JSON bytes as %d wire bytes (%.2fx)\n",
		st.JSONBytesSent, st.WireBytesSent, st.SendRatio(), st.JSONBytesReceived, st.WireBytesReceived, st.ReceiveRatio())
	if failed == len(files) {
		return fmt.Errorf("all %s failed: is 'm2md demo provider' running against the same daemon?", english.Plural(failed, "request", "requests"))
	}
	return nil
}
