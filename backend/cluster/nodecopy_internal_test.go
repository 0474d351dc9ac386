package cluster

import (
	"reflect"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
)

// TestNodeMapsKeptOrCopied: a StaticSource's nodes, which nobody modifies
// once it has them, are kept by the runtime as they are (no copy of their
// maps per node); a node reported by any other source is copied, so the
// source may reuse its maps.
func TestNodeMapsKeptOrCopied(t *testing.T) {
	is := is.New(t)
	same := func(a, b any) bool { return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer() }
	nodes := []Node{{
		Name:      "a",
		Resources: backend.Resources{backend.CPU: 1},
		Labels:    map[string]string{"zone": "x"},
		Env:       map[string]string{"E": "1"},
	}}
	rt, err := New(NewStaticSource(nodes), GoroutineRunner{}, Options{Nodes: nodes})
	is.NoErr(err)
	n := rt.byName["a"]
	is.True(same(n.labels, nodes[0].Labels) && same(n.env, nodes[0].Env) && same(n.spec.Resources, nodes[0].Resources))

	rt, err = New(NewStaticSource(nil), GoroutineRunner{}, Options{})
	is.NoErr(err)
	other := Node{Name: "b", Resources: backend.Resources{backend.CPU: 1}, Labels: map[string]string{"zone": "y"}, Env: map[string]string{"E": "2"}}
	(*sink)(rt).NodeAdded(other)
	n = rt.byName["b"]
	is.True(!same(n.labels, other.Labels) && !same(n.env, other.Env) && !same(n.spec.Resources, other.Resources))
	other.Labels["zone"] = "changed"
	is.Equal(n.labels["zone"], "y") // the source's later change does not reach the runtime
}
