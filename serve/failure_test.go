package serve_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/serve"
)

// replicaWith returns the first replica whose status satisfies cond.
func replicaWith(st serve.DeploymentStatus, cond func(serve.ReplicaStatus) bool) (serve.ReplicaStatus, bool) {
	for _, r := range st.Replicas {
		if cond(r) {
			return r, true
		}
	}
	return serve.ReplicaStatus{}, false
}

// usesHost reports whether any replica runs on host.
func usesHost(st serve.DeploymentStatus, host string) bool {
	_, ok := replicaWith(st, func(r serve.ReplicaStatus) bool { return slices.Contains(r.Hosts, host) })
	return ok
}

func TestLostHostRetriesAndReplaces(t *testing.T) {
	tests := []struct {
		name       string
		idempotent bool
		host       int // which host of the replica dies
		wantCode   int
	}{
		{"idempotent, serving host dies", true, 0, http.StatusOK},
		{"idempotent, worker host dies", true, 1, http.StatusOK},
		{"not idempotent, serving host dies", false, 0, http.StatusServiceUnavailable},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			c, b := newCluster(t, 3)
			srv := serve.New(c, nil)
			base, client := startServer(t, srv)
			name := fmt.Sprintf("loss%d", i)
			d := deployment(name)
			d.MinReplicas, d.Idempotent = 2, tt.idempotent
			d.Health = &serve.HealthCheck{Period: time.Hour} // only the host watch and the failed call detect the loss
			is.NoErr(srv.Deploy(context.Background(), d))

			gate := newGate(name)
			result := make(chan []byte, 1)
			code := make(chan int, 1)
			go func() {
				c, _, body := post(t, client, base+"/"+name, EchoIn{Text: "x", Gate: gate})
				code <- c
				result <- body
			}()
			gates.arrivals(t, gate, 1)
			var victim serve.ReplicaStatus
			waitStatus(t, srv, "the request on a replica", func(st serve.Status) bool {
				var ok bool
				victim, ok = replicaWith(dep(st, name), func(r serve.ReplicaStatus) bool { return r.Ongoing == 1 })
				return ok
			})
			dead := victim.Hosts[tt.host]
			is.NoErr(b.KillNode(context.Background(), dead))

			// The replica leaves routing at once and a replacement starts
			// on the spare slice.
			waitStatus(t, srv, "the replacement", func(st serve.Status) bool {
				d := dep(st, name)
				return d.ReplicaFailures >= 1 && d.Ready == 2 && !usesHost(d, dead)
			})
			if tt.idempotent {
				gates.arrivals(t, gate, 1) // retried on another replica
			}
			gates.release(gate)
			is.Equal(<-code, tt.wantCode)
			body := <-result
			if tt.wantCode == http.StatusOK {
				var out EchoOut
				is.NoErr(json.Unmarshal(body, &out))
				is.True(out.Host != victim.Hosts[0]) // answered by another replica
			} else {
				is.True(strings.Contains(string(body), "was lost"))
			}
			// Later requests all succeed.
			for range 5 {
				c, _, _ := post(t, client, base+"/"+name, EchoIn{Text: "y"})
				is.Equal(c, http.StatusOK)
			}
			st := dep(srv.Status(), name)
			is.Equal(st.SlicesHeld, 2)
			is.Equal(reservedSlices(t, c), 2) // the broken slice was released
		})
	}
}

func TestScaleUpWaitsForSliceWithoutBlockingTraffic(t *testing.T) {
	is := is.New(t)
	ctx := context.Background()
	c, _ := newCluster(t, 2)
	srv := serve.New(c, nil)
	base, client := startServer(t, srv)
	g := newGate("up")
	d := deployment("up")
	d.MaxReplicas = 2
	d.Autoscaling = &serve.Autoscaling{TargetOngoingRequests: 1, Interval: 2 * time.Millisecond, DownscaleDelay: time.Hour}
	is.NoErr(srv.Deploy(ctx, d))
	// Someone else holds the only other slice.
	other, err := ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{Topology: "2x4", AcceleratorVersion: "v6e", ChipsPerVM: 4})
	is.NoErr(err)

	codes := make(chan int, 2)
	for range 2 {
		go func() {
			c, _, _ := post(t, client, base+"/up", EchoIn{Text: "x", Gate: g})
			codes <- c
		}()
	}
	gates.arrivals(t, g, 2)
	waitStatus(t, srv, "a replica waiting for a slice", func(st serve.Status) bool {
		d := dep(st, "up")
		_, starting := replicaWith(d, func(r serve.ReplicaStatus) bool { return r.State == "STARTING" })
		return d.Target == 2 && starting
	})
	// Traffic still flows to the ready replica.
	code, _, _ := post(t, client, base+"/up", EchoIn{Text: "y"})
	is.Equal(code, http.StatusOK)
	is.Equal(dep(srv.Status(), "up").Ready, 1)

	is.NoErr(other.Release(ctx))
	waitStatus(t, srv, "the second replica", func(st serve.Status) bool { return dep(st, "up").Ready == 2 })
	gates.release(g)
	is.Equal(<-codes, 200)
	is.Equal(<-codes, 200)
	is.Equal(reservedSlices(t, c), 2)
}

func TestAutoscaleUpOnQueueDownWhenIdle(t *testing.T) {
	is := is.New(t)
	c, _ := newCluster(t, 2)
	srv := serve.New(c, nil)
	base, client := startServer(t, srv)
	g := newGate("updown")
	d := deployment("updown")
	d.MinReplicas, d.MaxReplicas, d.MaxConcurrentRequests = 1, 2, 1
	d.Autoscaling = &serve.Autoscaling{TargetOngoingRequests: 1, Interval: 2 * time.Millisecond, DownscaleDelay: 10 * time.Millisecond}
	is.NoErr(srv.Deploy(context.Background(), d))
	// Two requests and one slot: one runs, one queues, and the load asks
	// for a second slice.
	codes := make(chan int, 2)
	for range 2 {
		go func() {
			c, _, _ := post(t, client, base+"/updown", EchoIn{Text: "x", Gate: g})
			codes <- c
		}()
	}
	waitStatus(t, srv, "two replicas", func(st serve.Status) bool { return dep(st, "updown").Ready == 2 })
	gates.arrivals(t, g, 2) // the queued request went to the new replica
	is.True(dep(srv.Status(), "updown").LastScaleUp > 0)
	gates.release(g)
	is.Equal(<-codes, 200)
	is.Equal(<-codes, 200)
	// Idle: back to one replica and one slice.
	waitStatus(t, srv, "one replica", func(st serve.Status) bool {
		d := dep(st, "updown")
		return d.Target == 1 && len(d.Replicas) == 1 && d.SlicesHeld == 1
	})
	is.Equal(reservedSlices(t, c), 1)
}

func TestScaleDownDrainsThenReleases(t *testing.T) {
	is := is.New(t)
	c, _ := newCluster(t, 2)
	srv := serve.New(c, nil)
	base, client := startServer(t, srv)
	ga, gb, gc := newGate("drainone-a"), newGate("drainone-b"), newGate("drainone-c")
	d := deployment("drainone")
	d.MinReplicas, d.MaxReplicas, d.MaxConcurrentRequests = 1, 2, 1
	d.Autoscaling = &serve.Autoscaling{TargetOngoingRequests: 2, Interval: 2 * time.Millisecond, DownscaleDelay: 10 * time.Millisecond}
	is.NoErr(srv.Deploy(context.Background(), d))
	codes := make(chan int, 3)
	send := func(gate string) {
		go func() {
			c, _, _ := post(t, client, base+"/drainone", EchoIn{Text: "x", Gate: gate})
			codes <- c
		}()
	}
	// a runs on the first replica; b and c queue: 3 ongoing ask for two
	// replicas; b goes to the second.
	send(ga)
	gates.arrivals(t, ga, 1)
	send(gb)
	waitStatus(t, srv, "b queued", func(st serve.Status) bool { return dep(st, "drainone").Queued == 1 })
	send(gc)
	waitStatus(t, srv, "two replicas", func(st serve.Status) bool { return dep(st, "drainone").Ready == 2 })
	gates.arrivals(t, gb, 1)
	// a finishes; c takes its slot. Two requests on two replicas of one
	// slot each, at two per replica, ask for one replica: one drains
	// while its request runs, and keeps its slice until it is done.
	gates.release(ga)
	is.Equal(<-codes, 200)
	gates.arrivals(t, gc, 1)
	waitStatus(t, srv, "a replica draining", func(st serve.Status) bool {
		d := dep(st, "drainone")
		r, ok := replicaWith(d, func(r serve.ReplicaStatus) bool { return r.State == "DRAINING" })
		return ok && r.Ongoing == 1 && d.SlicesHeld == 2
	})
	is.Equal(reservedSlices(t, c), 2)
	gates.release(gb)
	gates.release(gc)
	is.Equal(<-codes, 200) // the draining replica's request finished
	is.Equal(<-codes, 200)
	waitStatus(t, srv, "one replica left", func(st serve.Status) bool {
		d := dep(st, "drainone")
		return d.Target == 1 && len(d.Replicas) == 1 && d.SlicesHeld == 1
	})
	is.Equal(reservedSlices(t, c), 1)
}

func TestProcessReplica(t *testing.T) {
	is := is.New(t)
	c, b := newCluster(t, 2)
	srv := serve.New(c, nil)
	base, client := startServer(t, srv)
	exe, err := os.Executable()
	is.NoErr(err)
	d := serve.Deployment{
		Name: "proc",
		Replica: serve.Process(serve.ProcessSpec{
			Command:       []string{exe, "-test.run=^$"},
			WorkerCommand: []string{exe, "-test.run=^$"},
			Env:           map[string]string{"SERVE_TEST_SERVER": "1"},
			StopTimeout:   5 * time.Second,
		}),
		Accelerator: "v6e", Topology: "2x4", ChipsPerVM: 4,
		Idempotent: true,
		Health:     &serve.HealthCheck{Period: 20 * time.Millisecond},
	}
	is.NoErr(srv.Deploy(context.Background(), d))

	check := func() {
		code, _, body := post(t, client, base+"/proc/echo?x=1", map[string]int{"n": 1})
		is.Equal(code, http.StatusOK)
		var out map[string]string
		is.NoErr(json.Unmarshal(body, &out))
		is.Equal(out["worker"], "0") // host 0 serves, with its TPU env
		is.Equal(len(strings.Split(out["hostnames"], ",")), 2)
		is.Equal(out["body"], `{"n":1}`)
		is.Equal(out["query"], "x=1")
		is.True(strings.HasPrefix(out["listen"], "127.0.0.1:")) // where the worker is reached: loopback on the simulator
	}
	check()
	resp, err := client.Get(base + "/proc/events")
	is.NoErr(err)
	evs, err := readSSE(resp.Body)
	resp.Body.Close()
	is.NoErr(err)
	is.Equal(len(evs), 3) // server-sent events pass through the proxy
	is.Equal(evs[2].Data, "2")

	// Losing the worker host replaces the replica, processes and all.
	old := dep(srv.Status(), "proc").Replicas[0]
	is.NoErr(b.KillNode(context.Background(), old.Hosts[1]))
	waitStatus(t, srv, "the replacement", func(st serve.Status) bool {
		d := dep(st, "proc")
		return d.Ready == 1 && !usesHost(d, old.Hosts[1])
	})
	check()
}

func TestStreamRetriedMidwaySkipsSentChunks(t *testing.T) {
	is := is.New(t)
	c, b := newCluster(t, 3)
	srv := serve.New(c, nil)
	base, client := startServer(t, srv)
	d := deployment("midway")
	d.MinReplicas, d.Idempotent = 2, true
	is.NoErr(srv.Deploy(context.Background(), d))
	g := newGate("midway")
	resp, err := client.Post(base+"/midway/stream", "application/json", strings.NewReader(`{"Text":"a b c","Gate":"`+g+`"}`))
	is.NoErr(err)
	defer resp.Body.Close()
	gates.arrivals(t, g, 1) // "a" is sent; the function waits before "b"
	var victim serve.ReplicaStatus
	waitStatus(t, srv, "the stream on a replica", func(st serve.Status) bool {
		var ok bool
		victim, ok = replicaWith(dep(st, "midway"), func(r serve.ReplicaStatus) bool { return r.Ongoing == 1 })
		return ok
	})
	is.NoErr(b.KillNode(context.Background(), victim.Hosts[0]))
	gates.arrivals(t, g, 1) // replayed on the other replica, up to the same point
	gates.release(g)
	evs, err := readSSE(resp.Body)
	is.NoErr(err)
	var got []string
	for _, ev := range evs {
		got = append(got, ev.Event+ev.Data)
	}
	is.Equal(got, []string{`"midway:a"`, `"midway:b"`, `"midway:c"`, "done{}"}) // every chunk once, in order
}
