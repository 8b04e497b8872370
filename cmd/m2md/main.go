// Command m2md is the M2M Protocol daemon and toolbox.
//
//	m2md serve       run the routing daemon (QUIC + WebSocket)
//	m2md compress    JSON on stdin → a wire form on stdout
//	m2md decompress  any wire form on stdin → the original JSON on stdout
//	m2md inspect     print a frame's readable header as JSON, without a key
//	m2md bench       load and codec benchmarks
//	m2md upstream    a provider agent in front of an OpenAI-compatible server
//	m2md cert        a cluster's CA and node certificates, and fingerprints
//	m2md demo        a provider and a requester agent to try the daemon with
//	m2md key         an org's secret, and an agent's key derived from it
//	m2md version     the version, commit and Go version of this build
//
// Exit codes: 0 success, 1 bad input or a failed run (one-line reason on
// stderr), 2 usage (a wrong flag or argument). Help asked for goes to stdout.
// The conventions new flags follow are in flags.go.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/mattn/go-isatty"

	"github.com/m2md/m2md/internal/buildinfo"
)

const (
	exitOK       = 0
	exitBadInput = 1
	exitUsage    = 2
)

type command struct {
	name    string
	summary string
	run     func(args []string, stdin io.Reader, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"serve", "run the routing daemon", runServe},
		{"compress", "read JSON on stdin, write a wire form on stdout", runCompress},
		{"decompress", "read any wire form on stdin, write the original JSON on stdout", runDecompress},
		{"inspect", "print a frame's readable header as JSON (no key, no decompression)", runInspect},
		{"bench", "load benchmark against a daemon, or codec comparison", runBench},
		{"upstream", "a provider agent in front of an OpenAI-compatible server", runUpstream},
		{"cert", "cluster certificates: 'cert ca', 'cert node', 'cert fingerprint'", runCert},
		{"demo", "demo agents: 'demo provider' serves models, 'demo requester' sends the corpus", runDemo},
		{"key", "secrets of an authenticated mesh: 'key org' makes an org secret, 'key agent' an agent's key", runKey},
		{"version", "print the version, commit and Go version", runVersion},
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		printUsage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 { // m2md help compress
			return run([]string{args[1], "--help"}, stdin, stdout, stderr)
		}
		printUsage(stdout)
		return exitOK
	case "-version", "--version":
		args = []string{"version"}
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		return exitCode(c.run(args[1:], stdin, stdout, stderr), "m2md "+c.name, stdout, stderr)
	}
	fmt.Fprintf(stderr, "m2md: unknown command %q\n\n", args[0])
	printUsage(stderr)
	return exitUsage
}

// exitCode reports err (help on stdout, anything else as one line on stderr)
// and returns the exit code the README promises.
func exitCode(err error, prefix string, stdout, stderr io.Writer) int {
	var help helpError
	msg := ""
	if err != nil {
		// Packages start their errors with their name, which for "m2md
		// bench" repeats the command's: "m2md bench: bench: …".
		_, cmd, _ := strings.Cut(prefix, " ")
		msg = strings.TrimPrefix(err.Error(), cmd+": ")
	}
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &help):
		fmt.Fprint(stdout, help.text)
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, new(usageError)):
		fmt.Fprintf(stderr, "%s: %s\n", prefix, msg)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "%s: %s\n", prefix, msg)
		return exitBadInput
	}
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "m2md: the M2M Protocol daemon and toolbox")
	fmt.Fprintln(w, "\nUsage: m2md <command> [flags]\n\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'm2md <command> --help' for a command's flags.")
	fmt.Fprintln(w, "Exit codes: 0 ok, 1 bad input or a failed run, 2 usage (a wrong flag or argument).")
}

// isTerminal reports whether w is a terminal: progress bars and colours only
// go there, never into logs and pipes.
func isTerminal(w io.Writer) bool {
	if n, ok := w.(flagNamesWriter); ok {
		w = n.w
	}
	f, ok := w.(*os.File)
	return ok && isatty.IsTerminal(f.Fd())
}

func runVersion(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", "version\n\nPrints the module version, the commit it was built from and the Go version.", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	in := buildinfo.Get()
	_, err := fmt.Fprintf(stdout, "m2md %s (commit %s, %s)\n", in.Version, in.Commit, in.GoVersion)
	return err
}
