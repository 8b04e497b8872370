// Package configerr is the error a library returns for a Config value out
// of its range, or in conflict with another: it names the settings by
// their Go fields, qualified by package and type ("daemon.Config.MaxSessions"),
// so that an embedder knows which field to change and a command can
// translate each name to the flag that sets it (cmd/m2md does).
package configerr

import (
	"fmt"
	"time"
)

// Error is a Config value a library refuses. Error() is the whole message;
// every field it names is written qualified, as Field is.
type Error struct {
	// Field is the setting at fault, qualified: "cluster.Config.Listen".
	// Other fields the message names (one it conflicts with, one to set
	// instead) appear in it in the same form.
	Field string
	err   error
}

// New returns an Error for field, its message formatted as fmt.Errorf does
// (%w wraps, so errors.Is finds a package's sentinel such as
// daemon.ErrConfig).
func New(field, format string, args ...any) *Error {
	return &Error{Field: field, err: fmt.Errorf(format, args...)}
}

func (e *Error) Error() string { return e.err.Error() }

// Unwrap returns what the message wraps.
func (e *Error) Unwrap() error { return e.err }

// OrDefault is the rule for a number that cannot be turned off: it sets
// *p to def when it is zero (the documented default) and refuses a
// negative one with an Error for field. Callers lead the message with
// their package (daemon wraps its ErrConfig).
func OrDefault[T int | int64 | time.Duration](field string, p *T, def T) error {
	switch {
	case *p == 0:
		*p = def
	case *p < 0:
		return New(field, "%s is %v; it must be positive (0 means the default, %v)", field, *p, def)
	}
	return nil
}
