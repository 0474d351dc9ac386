//go:build e2e

package kubernetes

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/data"
	"github.com/goray-dev/goray/internal/kubeharness"
	"github.com/goray-dev/goray/ray"
)

// scaled is a row as a pool actor in a worker pod answers it: the value,
// and the slice its pod's own env says it runs on.
type scaled struct {
	V     int
	Slice string
}

type k8sScaler struct{ factor int }

var (
	k8sScalerClass = ray.NewActorClass("k8stest.scaler", func(ctx context.Context, factor int) (*k8sScaler, error) {
		return &k8sScaler{factor: factor}, nil
	})
	k8sScale = data.NewMapMethod(k8sScalerClass, "scale", func(_ context.Context, s *k8sScaler, x int) (scaled, error) {
		return scaled{V: x * s.factor, Slice: os.Getenv("TPU_NAME")}, nil
	})
)

// TestE2EDataPoolOnSlices: data.ApplyPool whose actors each hold a v6e 2x4
// slice, in worker pods on a real control plane; every row comes back,
// in order, computed in a pod of a reserved slice; the slices are
// released and the pods deleted at the end.
func TestE2EDataPoolOnSlices(t *testing.T) {
	is := is.New(t)
	ctx := t.Context()
	cp, c := slicesCluster(t, "2x4", []string{"slice-a", "slice-b"}, nil)
	_, err := cp.AddCPUNodes(ctx, kubeharness.CPUNodes{Name: "cpu", Count: 1})
	is.NoErr(err)

	pool := data.Pool[*k8sScaler, int]{
		Cluster: c, Class: k8sScalerClass, Arg: 3, Min: 2, Max: 2,
		Slice: &ray.SliceSpec{AcceleratorVersion: "v6e", Topology: "2x4", ChipsPerVM: 4},
	}
	got, err := data.Take(ctx, data.ApplyPool(data.Range(200), pool, k8sScale, data.BatchSize(10)), 1000)
	is.NoErr(err)
	is.Equal(len(got), 200)
	slices := map[string]bool{}
	for i, r := range got {
		is.Equal(r.V, 3*i) // row by row, in order
		slices[r.Slice] = true
	}
	t.Logf("rows computed on slices %v", slices)
	for s := range slices {
		is.True(s == "slice-a" || s == "slice-b") // in a pod of a reserved slice
	}
	releasedAndGone(t, cp, c)
}

var k8sScaleOrPanic = data.NewMapMethod(k8sScalerClass, "scale_or_panic", func(_ context.Context, s *k8sScaler, x int) (int, error) {
	if x == 57 {
		var m map[int]int
		m[x] = x // panics, in the worker pod
	}
	return x * s.factor, nil
})

// TestE2EDataPanicInPodFailsTheRun: a pool actor's method that panics in
// its worker pod fails the run with a *data.PanicError, as a panic in the
// driver does, carrying the pod's stack (a ray.TaskError inside), also
// with SkipBadRows; no count comes back as complete, and the slice is
// released.
func TestE2EDataPanicInPodFailsTheRun(t *testing.T) {
	is := is.New(t)
	ctx := t.Context()
	cp, c := slicesCluster(t, "2x4", []string{"slice-a"}, nil)
	_, err := cp.AddCPUNodes(ctx, kubeharness.CPUNodes{Name: "cpu", Count: 1})
	is.NoErr(err)

	pool := data.Pool[*k8sScaler, int]{
		Cluster: c, Class: k8sScalerClass, Arg: 3, Min: 1, Max: 1,
		Slice: &ray.SliceSpec{AcceleratorVersion: "v6e", Topology: "2x4", ChipsPerVM: 4},
	}
	n, err := data.Count(ctx, data.ApplyPool(data.Range(200), pool, k8sScaleOrPanic, data.BatchSize(10)))
	t.Log(err)
	is.Equal(n, int64(0)) // nothing counted as complete
	var pe *data.PanicError
	is.True(errors.As(err, &pe)) // a bug, not a bad row
	is.Equal(pe.Op, "k8stest.scaler.scale_or_panic")
	is.Equal(ray.CodeOf(err), ray.TaskFailed)
	var te *ray.TaskError
	is.True(errors.As(err, &te))
	is.True(te.Panicked)
	is.True(strings.Contains(err.Error(), "assignment to entry in nil map"))
	is.True(strings.Contains(string(pe.Stack), "e2e_data_test.go")) // the pod's stack, with the panicking line
	_, err = data.Count(ctx, data.ApplyPool(data.Range(200), pool, k8sScaleOrPanic, data.BatchSize(10)), data.SkipBadRows(1000))
	is.True(errors.As(err, &pe)) // not skipped as bad rows

	releasedAndGone(t, cp, c)
}

// releasedAndGone checks that no slice is reserved, closes the cluster and
// waits for its pods to be deleted.
func releasedAndGone(t *testing.T, cp *kubeharness.ControlPlane, c *ray.Cluster) {
	t.Helper()
	is := is.New(t)
	ctx := t.Context()
	states, err := ray.TPUSlices(ctx, c)
	is.NoErr(err)
	for _, st := range states {
		is.Equal(st.ReservedBy, ray.PlacementGroupID(0)) // released
	}
	is.NoErr(c.Close())
	is.NoErr(cp.WaitForPodsGone(ctx, "default", LabelCluster))
}
