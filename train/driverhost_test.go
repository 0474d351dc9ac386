package train_test

import (
	"context"
	"errors"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/internal/testkit"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/train"
)

// remoteWorkers is the simulator posing as a backend whose workers cannot
// reach the driver's loopback, and which knows no address they can reach
// (a driver outside a Kubernetes cluster).
type remoteWorkers struct{ *local.Backend }

func (remoteWorkers) DriverHost(context.Context) (string, error) {
	return "", backend.Errorf(backend.FailedPrecondition, "find the driver's address for its workers", "the driver runs outside the cluster")
}

// TestRendezvousWhereWorkersReachIt: with no RunConfig.Rendezvous, a run
// on a backend that knows no address its workers can reach fails at once,
// naming the setting, instead of listening on 127.0.0.1 and hanging until
// a timeout.
func TestRendezvousWhereWorkersReachIt(t *testing.T) {
	is := is.New(t)
	lb, err := local.New(local.ClusterSpec{TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "2x4"}}}, nil)
	is.NoErr(err)
	c, err := ray.NewCluster(t.Context(), remoteWorkers{lb}, nil)
	is.NoErr(err)
	defer c.Close()
	tr, err := train.New(c, counting, countCfg{Iters: 1, Len: 1},
		train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "2x4"}, train.RunConfig{Name: "remote", Progress: train.ProgressOff})
	is.NoErr(err)
	_, err = tr.Fit(t.Context())
	testkit.ErrContains(t, err, "Set RunConfig.Rendezvous: find the driver's address for its workers: the driver runs outside the cluster")
	is.Equal(ray.CodeOf(err), ray.FailedPrecondition)
	is.True(!errors.Is(err, context.DeadlineExceeded))

	host, err := ray.DriverHost(t.Context(), c)
	is.True(err != nil && host == "")
}

// TestDriverHostDefault: backends that run workers beside the driver
// reach it on loopback.
func TestDriverHostDefault(t *testing.T) {
	is := is.New(t)
	_, c := newCluster(t, "2x4", 1, false)
	host, err := ray.DriverHost(t.Context(), c)
	is.NoErr(err)
	is.Equal(host, "127.0.0.1")
}
