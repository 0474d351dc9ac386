package testkit

import (
	"errors"
	"testing"
)

// recorder is a testing.TB that records failures instead of failing.
type recorder struct {
	testing.TB
	failed []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.failed = append(r.failed, format)
}

func TestErrContains(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want string
		fail bool
	}{
		{"contains", errors.New("reserve TPU slices: 0 free"), "0 free", false},
		{"does not contain", errors.New("reserve TPU slices"), "0 free", true},
		{"nil error", nil, "0 free", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{TB: t}
			ErrContains(r, tc.err, tc.want)
			if got := len(r.failed) > 0; got != tc.fail {
				t.Fatalf("failed = %v, want %v", got, tc.fail)
			}
		})
	}
}
