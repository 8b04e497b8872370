// Command m2md is the M2M Protocol daemon and toolbox.
//
//	m2md serve       run the routing daemon (QUIC + WebSocket)
//	m2md compress    JSON on stdin → a wire form on stdout
//	m2md decompress  any wire form on stdin → the original JSON on stdout
//	m2md inspect     print a frame's readable header as JSON, without a key
//	m2md bench       load and codec benchmarks
//	m2md demo        a provider and a requester agent to try the daemon with
//
// Exit codes: 0 success, 1 bad input (one-line reason on stderr), 2 usage.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

const (
	exitOK       = 0
	exitBadInput = 1
	exitUsage    = 2
)

// usageError marks errors that deserve exit code 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return usageError{fmt.Sprintf(format, args...)}
}

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
		{"demo", "demo agents: 'demo provider' serves models, 'demo requester' sends the corpus", runDemo},
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		printUsage(stderr)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(args[1:], stdin, stdout, stderr)
		switch {
		case err == nil:
			return exitOK
		case errors.Is(err, flag.ErrHelp):
			return exitOK
		case errors.As(err, new(usageError)):
			fmt.Fprintf(stderr, "m2md %s: %v\n", c.name, err)
			return exitUsage
		default:
			fmt.Fprintf(stderr, "m2md %s: %v\n", c.name, err)
			return exitBadInput
		}
	}
	fmt.Fprintf(stderr, "m2md: unknown command %q\n\n", args[0])
	printUsage(stderr)
	return exitUsage
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "m2md: the M2M Protocol daemon and toolbox")
	fmt.Fprintln(w, "\nUsage: m2md <command> [flags]\n\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'm2md <command> --help' for a command's flags.")
	fmt.Fprintln(w, "Exit codes: 0 ok, 1 bad input, 2 usage.")
}

// newFlagSet returns a FlagSet that reports errors instead of exiting, with a
// usage text that lists the command's flags.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("m2md "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: m2md %s\n\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args and turns flag errors into usage errors.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	return nil
}
