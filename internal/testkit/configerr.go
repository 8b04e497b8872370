package testkit

import (
	"errors"
	"strings"
	"testing"

	"github.com/m2md/m2md/internal/configerr"
)

// WantConfigError fails the test unless err is (or wraps) a Config error
// for field, the qualified Go name of the setting at fault
// ("daemon.Config.MaxSessions"), whose message holds want.
func WantConfigError(t testing.TB, err error, field, want string) {
	t.Helper()
	var ce *configerr.Error
	if !errors.As(err, &ce) || ce.Field != field || !strings.Contains(err.Error(), want) {
		t.Errorf("%v, want a Config error for %s containing %q", err, field, want)
	}
}
