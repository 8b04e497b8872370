package testkit

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// recorder is a testing.TB that records a failure instead of ending the
// test, so the helpers' refusals can be checked.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatal(args ...any) {
	r.failed = "fatal"
	panic(r)
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = format
	panic(r)
}

// fails reports whether f failed the test it was given.
func fails(t *testing.T, f func(tb testing.TB)) (failed bool) {
	r := &recorder{TB: t}
	defer func() {
		if v := recover(); v != nil && v != any(r) {
			panic(v)
		}
		failed = r.failed != ""
	}()
	f(r)
	return false
}

func TestUnhex(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []byte
	}{
		{"", []byte{}},
		{"00ff10", []byte{0x00, 0xff, 0x10}},
		{"00 ff\n\t10 ", []byte{0x00, 0xff, 0x10}},
		{"4d 32\n4d", []byte("M2M")},
	} {
		if got := Unhex(t, tc.in); !bytes.Equal(got, tc.want) {
			t.Errorf("Unhex(%q) = %x, want %x", tc.in, got, tc.want)
		}
	}
	for _, bad := range []string{"0", "zz", "0 0 0"} {
		if !fails(t, func(tb testing.TB) { Unhex(tb, bad) }) {
			t.Errorf("Unhex(%q) did not fail the test", bad)
		}
	}
}

func TestCorpus(t *testing.T) {
	docs := Corpus(t)
	seen := map[string]bool{}
	for _, d := range docs {
		if !strings.HasSuffix(d.Name, ".json") || strings.Contains(d.Name, `\`) || len(d.Data) == 0 {
			t.Errorf("document %q (%d bytes)", d.Name, len(d.Data))
		}
		seen[d.Name] = true
	}
	for _, name := range []string{"req-chat-1k-01.json", "conversations/conv-01/turn-01.json"} {
		if !seen[name] {
			t.Errorf("corpus lacks %s", name)
		}
	}
	if got := CorpusFile(t, "req-chat-1k-01.json"); len(got) != 1215 {
		t.Errorf("req-chat-1k-01.json: %d bytes, want 1,215", len(got))
	}
	if !fails(t, func(tb testing.TB) { CorpusFile(tb, "no-such-file.json") }) {
		t.Error("a missing corpus file did not fail the test")
	}
}

func TestContextEndsAfterDuration(t *testing.T) {
	ctx := Context(t, 10*time.Millisecond)
	select {
	case <-ctx.Done():
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Errorf("ctx.Err() = %v, want DeadlineExceeded", ctx.Err())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("context still open 10 s after a 10 ms bound")
	}
}

func TestContextEndsWithTest(t *testing.T) {
	var ctx context.Context
	t.Run("inner", func(t *testing.T) { ctx = Context(t, time.Hour) })
	if ctx.Err() == nil {
		t.Error("context still open after its test ended")
	}
}
