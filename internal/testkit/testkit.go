// Package testkit holds the assertions the root module's tests share.
package testkit

import (
	"strings"
	"testing"
)

// ErrContains fails t unless err is not nil and its message contains
// want; the failure prints both, where is.True(strings.Contains(...))
// would print only "false".
func ErrContains(t testing.TB, err error, want string) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("got no error, want one containing %q", want)
	case !strings.Contains(err.Error(), want):
		t.Errorf("error %q\n  does not contain %q", err.Error(), want)
	}
}
