package cluster_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/cluster"
	"github.com/goray-dev/goray/tpu"
)

// namingRunner is a testRunner whose workers are reached by names of
// their own (cluster.HostNamer), as pods are by DNS names.
type namingRunner struct{ *testRunner }

func (namingRunner) HostNames(c cluster.Claim) [][]string {
	out := make([][]string, len(c.Hosts))
	for i, hosts := range c.Hosts {
		for j := range hosts {
			out[i] = append(out[i], fmt.Sprintf("%s-s%d-w%d.svc", c.ID, i, j))
		}
	}
	return out
}

// With a runner that names its workers, every env of a reservation is
// derived once with those names: the reservation's bundles (what a task
// in the bundle sees), its slices' Hostnames and the env the runner
// starts each host's worker with are the same, for whole slices,
// multislice and a sub-slice.
func TestHostNamesAreTheEnvsNames(t *testing.T) {
	for _, tt := range []struct {
		name string
		req  *backend.SliceRequest
	}{
		{"multislice", &backend.SliceRequest{Shape: shape4x4, NumSlices: 2, Name: "ms"}},
		{"sub-slice", subRequest("sub")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			src := newTestSource(t, tpuHosts4x4(2))
			r := namingRunner{newTestRunner()}
			rt := start(t, src, r)
			defer rt.Close()
			res, err := rt.ReserveSlices(context.Background(), tt.req)
			is.NoErr(err)
			id := res.Group.String()
			r.mu.Lock()
			hostEnv := r.reserved[id]
			r.mu.Unlock()
			b := 0
			for si, sl := range res.Slices {
				is.Equal(len(sl.Hostnames), len(sl.Hosts))
				for j, name := range sl.Hostnames {
					is.Equal(name, fmt.Sprintf("%s-s%d-w%d.svc", id, si, j))
				}
				for j, host := range sl.Hosts {
					env := res.Env[b]
					b += res.BundlesPerHost
					is.Equal(env[tpu.EnvWorkerHostnames], strings.Join(sl.Hostnames, ","))
					is.Equal(env, hostEnv[host]) // the worker starts with the bundle's env
					is.Equal(env[tpu.EnvWorkerID], fmt.Sprint(j))
					if len(res.Slices) > 1 {
						is.Equal(env[tpu.EnvMegascaleCoordinatorAddress], res.Slices[0].Hostnames[0])
					}
				}
			}
			is.NoErr(rt.RemovePlacementGroup(context.Background(), res.Group))
		})
	}
}

// badNamingRunner names one host too few.
type badNamingRunner struct{ *testRunner }

func (badNamingRunner) HostNames(c cluster.Claim) [][]string {
	out := namingRunner{}.HostNames(c)
	out[0] = out[0][1:]
	return out
}

// A runner whose HostNames do not give one name per host fails the
// reservation with an error saying so, instead of an env whose
// TPU_WORKER_HOSTNAMES is empty (tpu.WorkerEnv's error was dropped); the
// slices stay free.
func TestBadHostNamesFailTheClaim(t *testing.T) {
	for _, tt := range []struct {
		name string
		req  *backend.SliceRequest
	}{
		{"whole slice", &backend.SliceRequest{Shape: shape4x4, NumSlices: 1, Name: "w"}},
		{"sub-slice", subRequest("sub")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			src := newTestSource(t, tpuHosts4x4(1))
			rt := start(t, src, badNamingRunner{newTestRunner()})
			defer rt.Close()
			_, err := rt.ReserveSlices(context.Background(), tt.req)
			is.Equal(backend.CodeOf(err), backend.Internal)
			is.True(strings.Contains(err.Error(), "want one distinct, non-empty name per host"))
			_, err = rt.ReserveSlices(context.Background(), tt.req)
			is.True(err != nil) // and again: nothing was left claimed in between
			is.True(strings.Contains(err.Error(), "want one distinct, non-empty name per host"))
		})
	}
}

// claimSeeingRunner is a namingRunner that records, for each claim it
// names, whether the source had claimed it then.
type claimSeeingRunner struct {
	namingRunner
	src     *testSource
	claimed map[string]bool // by claim ID: claimed when named
}

func (r claimSeeingRunner) HostNames(c cluster.Claim) [][]string {
	r.src.mu.Lock()
	_, ok := r.src.granted[c.ID]
	r.src.mu.Unlock()
	r.mu.Lock()
	r.claimed[c.ID] = ok
	r.mu.Unlock()
	return r.namingRunner.HostNames(c)
}

// The hosts of whole slices are named once the source has claimed them,
// so that a runner may name them by what the claim found (Kubernetes: the
// capacity pods already on the hosts, which become the worker pods); a
// sub-slice's when it is picked.
func TestHostNamesAfterTheClaim(t *testing.T) {
	for _, tt := range []struct {
		name  string
		req   *backend.SliceRequest
		after bool
	}{
		{"whole slices", &backend.SliceRequest{Shape: shape4x4, NumSlices: 2, Name: "ms"}, true},
		{"sub-slice", subRequest("sub"), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			src := newTestSource(t, tpuHosts4x4(2))
			r := claimSeeingRunner{namingRunner{newTestRunner()}, src, map[string]bool{}}
			rt := start(t, src, r)
			defer rt.Close()
			res, err := rt.ReserveSlices(context.Background(), tt.req)
			is.NoErr(err)
			r.mu.Lock()
			claimed, named := r.claimed[res.Group.String()]
			r.mu.Unlock()
			is.True(named)
			is.Equal(claimed, tt.after)
			is.NoErr(rt.RemovePlacementGroup(context.Background(), res.Group))
		})
	}
}
