package ray_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/ray"
)

type point struct{ x, y int }

type mixed struct {
	Name  string
	count int
}

type withChan struct{ C chan int }

type embedsUnexported struct {
	inner // its exported fields are promoted: fine
	N     int
}

type inner struct{ A string }

type leftOut struct {
	A     int
	cache map[string]int `ray:"-"`
}

// selfMarshal marshals itself, so its unexported field is its own business.
type selfMarshal struct{ v int }

func (s selfMarshal) MarshalJSON() ([]byte, error) { return []byte(fmt.Sprint(s.v)), nil }
func (s *selfMarshal) UnmarshalJSON(b []byte) error {
	_, err := fmt.Sscan(string(b), &s.v)
	return err
}

type iface interface{ M() }

// registers runs register and returns what it panicked with, or "".
func registers(register func()) (msg string) {
	defer func() {
		if v := recover(); v != nil {
			msg = fmt.Sprint(v)
		}
	}()
	register()
	return ""
}

var seq int

func name() string { seq++; return fmt.Sprintf("crossabletest.t%d", seq) }

func fn[I, O any](context.Context, I) (O, error) { var o O; return o, nil }

// Registration refuses input and output types that cannot cross between
// processes intact, naming the type and the field, instead of letting
// point{3, 4} arrive as {0 0} on another process.
func TestRegistrationRefusesTypesThatCannotCross(t *testing.T) {
	for _, tt := range []struct {
		name     string
		register func()
		want     string // "" for accepted
	}{
		{"unexported fields", func() { ray.NewTask(name(), fn[point, int]) }, "field ray_test.point.x is unexported, so it would arrive as its zero value"},
		{"mixed fields", func() { ray.NewTask(name(), fn[int, mixed]) }, "its output type ray_test.mixed cannot cross between processes: field ray_test.mixed.count is unexported"},
		{"nested in a slice", func() { ray.NewTask(name(), fn[[]map[string]point, int]) }, "field ray_test.point.x is unexported"},
		{"channel field", func() { ray.NewTask(name(), fn[withChan, int]) }, "field ray_test.withChan.C (chan int) is a chan"},
		{"func", func() { ray.NewTask(name(), fn[int, func()]) }, "is a func"},
		{"complex", func() { ray.NewTask(name(), fn[complex128, int]) }, "complex number"},
		{"error", func() { ray.NewTask(name(), fn[int, error]) }, "send its message as a string"},
		{"interface", func() { ray.NewTask(name(), fn[iface, int]) }, "use a concrete type"},
		{"struct map keys", func() { ray.NewTask(name(), fn[map[inner]int, int]) }, "cannot use as object keys"},
		{"actor constructor", func() { ray.NewActorClass(name(), func(context.Context, point) (*int, error) { return nil, nil }) }, "NewActorClass"},
		{"embedded unexported struct", func() { ray.NewTask(name(), fn[embedsUnexported, int]) }, ""},
		{"left out on purpose", func() { ray.NewTask(name(), fn[leftOut, int]) }, ""},
		{"marshals itself", func() { ray.NewTask(name(), fn[selfMarshal, int]) }, ""},
		{"time and any", func() { ray.NewTask(name(), fn[time.Time, map[string]any]) }, ""},
		{"recursive", func() { ray.NewTask(name(), fn[tree, int]) }, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			got := registers(tt.register)
			t.Log(got)
			if tt.want == "" {
				is.Equal(got, "")
				return
			}
			is.True(strings.Contains(got, tt.want))
		})
	}
}

type tree struct {
	Value    int
	Children []tree
}
