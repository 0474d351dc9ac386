package cluster

import (
	"math"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
)

// TestClassCache checks that the class cache answers only for a request of
// exactly the remembered shape.
func TestClassCache(t *testing.T) {
	cached := backend.Scheduling{Resources: backend.Resources{backend.CPU: 1, "x": 2}, Placement: backend.Placement{Bundle: -1}}
	for _, tc := range []struct {
		name  string
		s     backend.Scheduling
		swept bool
		hit   bool
	}{
		{name: "same map", s: cached, hit: true},
		{name: "equal map", s: backend.Scheduling{Resources: backend.Resources{"x": 2, backend.CPU: 1}, Placement: backend.Placement{Bundle: -1}}, hit: true},
		{name: "other amount", s: backend.Scheduling{Resources: backend.Resources{backend.CPU: 1, "x": 3}}},
		{name: "extra key", s: backend.Scheduling{Resources: backend.Resources{backend.CPU: 1, "x": 2, "y": 0}}},
		{name: "missing key", s: backend.Scheduling{Resources: backend.Resources{backend.CPU: 1}}},
		{name: "other key", s: backend.Scheduling{Resources: backend.Resources{backend.CPU: 1, "y": 2}}},
		{name: "NaN", s: backend.Scheduling{Resources: backend.Resources{backend.CPU: 1, "x": math.NaN()}}},
		{name: "selector", s: backend.Scheduling{Resources: cached.Resources, NodeSelector: backend.LabelSelector{"zone": "a"}}},
		{name: "placement group", s: backend.Scheduling{Resources: cached.Resources, Placement: backend.Placement{Group: 7, Bundle: -1}}},
		{name: "class swept", s: cached, swept: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			var cc classCache
			is.True(cc.lookup(&cached) == nil) // empty
			c := &class{}
			cc.remember(&cached, c)
			c.swept = tc.swept
			is.Equal(cc.lookup(&tc.s) == c, tc.hit)
		})
	}
	t.Run("uncacheable shape clears", func(t *testing.T) {
		is := is.New(t)
		var cc classCache
		cc.remember(&cached, &class{})
		sel := backend.Scheduling{Resources: cached.Resources, NodeSelector: backend.LabelSelector{"zone": "a"}}
		cc.remember(&sel, &class{})
		is.True(cc.lookup(&cached) == nil)
	})
}
