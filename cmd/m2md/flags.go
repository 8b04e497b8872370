package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"

	"github.com/dustin/go-humanize"
)

// Conventions every command follows (new flags and commands too):
//
//   - A FlagSet comes from newFlagSet and is parsed with parseFlags (or its
//     error goes through flagError, as serve's ff.Parse does). Help asked
//     for (-h, --help) goes to stdout with exit 0; a flag error is one line
//     on stderr with a pointer to --help, exit 2.
//   - A wrong flag value, a missing or conflicting flag is a usage error:
//     return usagef("--flag must be …, not %q", v) (exit 2). Bad data on
//     stdin, a missing file or a failed run is any other error (exit 1).
//   - Help lists flags as --name; a flag's placeholder is the word in
//     `backquotes` in its usage text and must read as its value: `file`,
//     `address`, `URL`, `n`, `size`. Durations take Go syntax (10s, 1m30s).
//   - Byte sizes are byteSizeVar flags (limitSizeVar for a limit -1 turns
//     off): 65536, 64KiB, 16MiB or 1MB.
//   - A flag that sets a library's Config field is a row of the command's
//     settings table (settings.go: serve, upstream, bench load) naming the
//     field; the library's errors and log lines, which name the field, then
//     reach the user naming the flag (settings.translate, logWriter).
//   - A renamed flag stays accepted under its old name through alias, hidden
//     from help, so scripts and documented commands keep working.
//   - A long-running command takes --log-level and --log-format through
//     registerLogFlags; an output file flag is checked with checkWritable
//     before work of minutes starts. An agent command takes its flags
//     (daemon, pin, agent id, org and key, log) from registerAgentFlags.
//   - TestCLIHelpReadable checks every command's help: add a new command to
//     its list.

// usageError marks errors that deserve exit code 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return usageError{fmt.Sprintf(format, args...)}
}

// helpError carries a command's help text, asked for with -h or --help:
// run prints it on stdout and exits 0.
type helpError struct{ text string }

func (e helpError) Error() string { return "help requested" }

// newFlagSet returns a FlagSet that reports errors instead of exiting, with a
// usage text of synopsis followed by the command's flags.
func newFlagSet(name, synopsis string, _ io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("m2md "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // parseFlags and flagError say what went wrong
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: m2md %s\n", synopsis)
		printFlags(w, fs)
	}
	return fs
}

// parseFlags parses args; a command takes no positional arguments.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return flagError(fs, err)
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q (run '%s --help')", fs.Arg(0), fs.Name())
	}
	return nil
}

// flagError turns what parsing fs returned into a helpError (its help text)
// or a usage error naming the flag in the form help shows it.
func flagError(fs *flag.FlagSet, err error) error {
	if errors.Is(err, flag.ErrHelp) {
		var buf bytes.Buffer
		fs.SetOutput(&buf)
		fs.Usage()
		fs.SetOutput(io.Discard)
		return helpError{buf.String()}
	}
	msg := err.Error()
	// The flag package and ff say "-name"; help and docs say "--name".
	msg = strings.TrimPrefix(msg, "error parsing commandline arguments: ")
	msg = strings.Replace(msg, ": -", ": --", 1)
	msg = strings.Replace(msg, "flag -", "flag --", 1)
	return usagef("%s (run '%s --help')", msg, fs.Name())
}

// alias accepts --old as another name of the flag --name, hidden from help.
func alias(fs *flag.FlagSet, old, name string) {
	fs.Var(fs.Lookup(name).Value, old, aliasUsage+name)
}

const aliasUsage = "\x00alias of --"

// printFlags lists fs's flags as `--name placeholder`, with their usage text
// and non-zero defaults, leaving out aliases.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	var flags []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.HasPrefix(f.Usage, aliasUsage) {
			flags = append(flags, f)
		}
	})
	if len(flags) == 0 {
		return
	}
	sort.Slice(flags, func(i, j int) bool { return flags[i].Name < flags[j].Name })
	fmt.Fprintln(w, "\nFlags:")
	for _, f := range flags {
		placeholder, usage := flag.UnquoteUsage(f)
		switch placeholder { // the flag package's type names read as jargon
		case "int", "uint", "float":
			placeholder = "n"
		case "string":
			placeholder = "value"
		case "value":
			if _, ok := f.Value.(*byteSize); ok {
				placeholder = "size"
			}
		}
		line := "  --" + f.Name
		if len(f.Name) == 1 {
			line = "  -" + f.Name
		}
		if placeholder != "" {
			line += " " + placeholder
		}
		fmt.Fprintln(w, line)
		usage = strings.ReplaceAll(usage, "\n", "\n        ")
		if def := f.DefValue; def != "" && def != "false" && def != "0" && def != "0s" {
			if strings.ContainsAny(def, " ") {
				def = fmt.Sprintf("%q", def)
			}
			usage += " (default " + def + ")"
		}
		fmt.Fprintf(w, "        %s\n", usage)
	}
}

// byteSize is a flag value in bytes written as a plain number or with a unit:
// 65536, 64KiB, 16MiB, 1MB (SI units are powers of 1000, IEC ones of 1024).
type byteSize struct {
	p         *int
	max       int  // 0: no maximum
	unlimited bool // -1 is taken as it is: the setting's "unlimited"
}

// byteSizeVar defines a byte-size flag that refuses values above max (0:
// no maximum).
func byteSizeVar(fs *flag.FlagSet, p *int, name string, value, max int, usage string) {
	*p = value
	fs.Var(&byteSize{p: p, max: max}, name, usage)
}

// limitSizeVar defines a byte-size flag of a limit that -1 turns off.
func limitSizeVar(fs *flag.FlagSet, p *int, name string, value int, usage string) {
	*p = value
	fs.Var(&byteSize{p: p, unlimited: true}, name, usage)
}

func (b *byteSize) String() string {
	if b == nil || b.p == nil {
		return "0"
	}
	return formatBytes(*b.p)
}

func (b *byteSize) Set(s string) error {
	if s == "-1" && b.unlimited {
		*b.p = -1
		return nil
	}
	n, err := humanize.ParseBytes(s)
	if err != nil || n > math.MaxInt32 {
		return fmt.Errorf("want a size like 65536, 64KiB or 16MiB, not %q", s)
	}
	if b.max > 0 && int(n) > b.max {
		return fmt.Errorf("%s is above the most allowed, %s", s, formatBytes(b.max))
	}
	*b.p = int(n)
	return nil
}

// formatBytes writes n the way a user would type it: 16MiB, 64KiB, or bytes
// when n is not a whole number of KiB.
func formatBytes(n int) string {
	switch {
	case n != 0 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n != 0 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprint(n)
}
