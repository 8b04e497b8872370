package main

import (
	"cmp"
	"errors"
	"flag"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/m2md/m2md/internal/configerr"
)

// setting is one flag and the library Config field it sets, written once:
// the flag is bound from it, and an error or log line of a library that
// names the field is shown naming the flag.
type setting struct {
	// field is the qualified Config field the flag sets
	// ("daemon.Config.MaxSessions"), or several separated by spaces when
	// the command copies the value to another Config too; "" for a flag of
	// the command alone.
	field string
	flag  string
	bind  binder
	usage string
}

// binder defines a flag of fs, its value stored where the binder points.
type binder func(fs *flag.FlagSet, name, usage string)

func strVar(p *string, def string) binder {
	return func(fs *flag.FlagSet, name, usage string) { fs.StringVar(p, name, def, usage) }
}

func boolVar(p *bool) binder {
	return func(fs *flag.FlagSet, name, usage string) { fs.BoolVar(p, name, false, usage) }
}

func intVar(p *int, def int) binder {
	return func(fs *flag.FlagSet, name, usage string) { fs.IntVar(p, name, def, usage) }
}

func durationVar(p *time.Duration, def time.Duration) binder {
	return func(fs *flag.FlagSet, name, usage string) { fs.DurationVar(p, name, def, usage) }
}

// sizeVar is byteSizeVar's binder: a byte size at most max (0: no maximum).
func sizeVar(p *int, def, max int) binder {
	return func(fs *flag.FlagSet, name, usage string) { byteSizeVar(fs, p, name, def, max, usage) }
}

// limitVar is limitSizeVar's binder: a byte size that -1 turns off.
func limitVar(p *int, def int) binder {
	return func(fs *flag.FlagSet, name, usage string) { limitSizeVar(fs, p, name, def, usage) }
}

// settings are a command's flags that set library Config fields.
type settings []setting

// register defines every flag on fs.
func (s settings) register(fs *flag.FlagSet) {
	for _, x := range s {
		x.bind(fs, x.flag, x.usage)
	}
}

// flagNames replaces each qualified Config field with the flag that sets
// it, as help shows it; a field two flags set reads "--a/--b".
func (s settings) flagNames() *strings.Replacer {
	flags := map[string][]string{}
	for _, x := range s {
		for _, f := range strings.Fields(x.field) {
			flags[f] = append(flags[f], "--"+x.flag)
		}
	}
	fields := make([]string, 0, len(flags))
	for f := range flags {
		fields = append(fields, f)
	}
	// Longest first, so that MaxSessionsPerIP is not read as MaxSessions.
	slices.SortFunc(fields, func(a, b string) int { return cmp.Or(len(b)-len(a), strings.Compare(a, b)) })
	var pairs []string
	for _, f := range fields {
		pairs = append(pairs, f, strings.Join(flags[f], "/"))
	}
	return strings.NewReplacer(pairs...)
}

// translate returns err as the user of the command needs it: an error of
// a library naming Config fields (configerr) reads with the flags instead,
// and still wraps what err wraps (errors.Is finds daemon.ErrConfig).
func (s settings) translate(err error) error {
	var ce *configerr.Error
	if !errors.As(err, &ce) {
		return err
	}
	return translated{msg: s.flagNames().Replace(err.Error()), err: err}
}

type translated struct {
	msg string
	err error
}

func (t translated) Error() string { return t.msg }
func (t translated) Unwrap() error { return t.err }

// logWriter returns w with every Config field the libraries' log lines
// name shown as its flag: one zerolog event is one Write.
func (s settings) logWriter(w io.Writer) io.Writer {
	return flagNamesWriter{w: w, r: s.flagNames()}
}

type flagNamesWriter struct {
	w io.Writer
	r *strings.Replacer
}

func (f flagNamesWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(f.w, f.r.Replace(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

func floatVar(p *float64, def float64) binder {
	return func(fs *flag.FlagSet, name, usage string) { fs.Float64Var(p, name, def, usage) }
}
