package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/m2md/m2md/internal/testkit"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// asCLIEnv makes the test binary run as m2md (TestMain).
const asCLIEnv = "M2MD_TEST_AS_CLI"

// proc is an m2md process a test started: this test binary run as the
// command, in its own working directory, with the test's environment.
type proc struct {
	t              testing.TB
	name           string
	cmd            *exec.Cmd
	stdout, stderr lockedBuffer
	done           chan struct{}
	code           int
}

// startM2MD starts `m2md args…` in dir. The process is interrupted (then
// killed) when the test ends, if it still runs.
func startM2MD(t testing.TB, dir string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: strings.Join(args[:min(2, len(args))], " "), done: make(chan struct{})}
	p.cmd = exec.Command(os.Args[0], args...)
	p.cmd.Dir = dir
	p.cmd.Env = append(os.Environ(), asCLIEnv+"=1")
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := p.cmd.Wait()
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee):
			p.code = ee.ExitCode()
		default:
			p.code = -1
		}
		close(p.done)
	}()
	t.Cleanup(p.stop)
	return p
}

// stop interrupts the process as Ctrl-C would and waits for it to end,
// killing it after a grace period.
func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		p.t.Errorf("%s did not stop on SIGINT; killed\nstderr: %s", p.name, p.stderr.String())
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(timeout):
		p.t.Fatalf("%s still runs after %v\nstdout: %s\nstderr: %s", p.name, timeout, p.stdout.String(), p.stderr.String())
		return 0
	}
}

// waitOutput waits until the process's stdout or stderr matches re and
// returns the first submatch (or the whole match).
func (p *proc) waitOutput(re string, timeout time.Duration) string {
	p.t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(timeout)
	for {
		for _, out := range []string{p.stdout.String(), p.stderr.String()} {
			if m := rx.FindStringSubmatch(out); m != nil {
				return m[len(m)-1]
			}
		}
		select {
		case <-p.done:
			p.t.Fatalf("%s exited (code %d) before printing %q\nstdout: %s\nstderr: %s", p.name, p.code, re, p.stdout.String(), p.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s did not print %q within %v\nstdout: %s\nstderr: %s", p.name, re, timeout, p.stdout.String(), p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// running reports whether the process has not exited.
func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// startServe starts `m2md serve` in dir on a QUIC port of its choosing,
// with no other listener than extra asks for, and returns the process and
// its quic:// URL once it listens.
func startServe(t *testing.T, dir string, extra ...string) (*proc, string) {
	t.Helper()
	args := append([]string{"serve", "--quic-addr", "127.0.0.1:0", "--ws-addr", "-", "--admin-addr", "-", "--openai-addr", "-", "--log-format", "json"}, extra...)
	p := startM2MD(t, dir, args...)
	url := p.waitOutput(`"quic":"(quic://127\.0\.0\.1:\d+)"`, 60*time.Second)
	return p, url
}

// lockedBuffer: output a process or logger writes while the test reads it.
type lockedBuffer = testkit.LockedBuffer

// checkJSONLines fails the test for a line of log that is not one JSON
// object with each key once: a reader that keeps the first or the last of
// two equal keys loses the other.
func checkJSONLines(t *testing.T, name, log string) {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "{") {
			continue // the one-line error m2md prints last
		}
		if err := uniqueKeys(line); err != nil {
			t.Errorf("%s log line %s: %v", name, line, err)
		}
	}
}

// uniqueKeys checks that line is a JSON object whose keys (at every level)
// appear once each.
func uniqueKeys(line string) error {
	dec := json.NewDecoder(strings.NewReader(line))
	var walk func() error
	walk = func() error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return err
				}
				key := k.(string)
				if seen[key] {
					return fmt.Errorf("key %q twice", key)
				}
				seen[key] = true
				if err := walk(); err != nil {
					return err
				}
			}
			_, err = dec.Token()
			return err
		case json.Delim('['):
			for dec.More() {
				if err := walk(); err != nil {
					return err
				}
			}
			_, err = dec.Token()
			return err
		}
		return nil
	}
	if err := walk(); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("more than one JSON value")
	}
	return nil
}
