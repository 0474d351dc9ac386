package serve_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/serve"
)

// muxActor is the multiplexed test model: it loads "weights" by model ID
// and records every load and unload under its deployment's name.
type muxActor struct{ name string }

type MuxIn struct {
	serve.MultiplexedModel
	Text string `json:",omitempty"`
	// Gate, if set, holds the call until the test opens it.
	Gate string `json:",omitempty"`
}

type MuxOut struct {
	Model, Weights, Host string
}

// muxEvents are the loads and unloads of one deployment's replicas.
type muxEvents struct {
	mu              sync.Mutex
	loads, unloads  []string
	loadsByID       map[string]int
	unloadedWeights []string
}

var muxLogs sync.Map // deployment name → *muxEvents

func muxLog(name string) *muxEvents {
	e, _ := muxLogs.LoadOrStore(name, &muxEvents{loadsByID: map[string]int{}})
	return e.(*muxEvents)
}

func (e *muxEvents) snapshot() (loads, unloads []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.loads), slices.Clone(e.unloads)
}

var (
	muxClass = ray.NewActorClass("servetest.mux", func(ctx context.Context, name string) (*muxActor, error) {
		return &muxActor{name: name}, nil
	})
	muxModels = serve.NewModels(muxClass, "models", serve.ModelLoader[*muxActor, string]{
		Load: func(ctx context.Context, a *muxActor, id string) (string, error) {
			ev := muxLog(a.name)
			ev.mu.Lock()
			ev.loads = append(ev.loads, id)
			ev.loadsByID[id]++
			ev.mu.Unlock()
			switch {
			case strings.HasPrefix(id, "slow#"):
				if err := gates.wait(ctx, id); err != nil {
					return "", err
				}
			case id == "missing":
				return "", serve.CodeError(ray.NotFound, "no weights for model missing")
			case id == "broken":
				return "", errors.New("weights corrupt")
			}
			return "weights-of-" + id, nil
		},
		Unload: func(ctx context.Context, a *muxActor, id string, weights string) {
			ev := muxLog(a.name)
			ev.mu.Lock()
			ev.unloads = append(ev.unloads, id)
			ev.unloadedWeights = append(ev.unloadedWeights, weights)
			ev.mu.Unlock()
		},
	})
	muxCall = ray.NewMethod(muxClass, "call", func(ctx context.Context, a *muxActor, in MuxIn) (MuxOut, error) {
		w, err := muxModels.Get(ctx, a, in.MultiplexedModelID)
		if err != nil {
			return MuxOut{}, err
		}
		if err := gates.wait(ctx, in.Gate); err != nil {
			return MuxOut{}, err
		}
		rc, _ := ray.Runtime(ctx)
		return MuxOut{Model: in.MultiplexedModelID, Weights: w, Host: rc.NodeName()}, nil
	})
)

// muxDeployment is a multiplexed deployment of n CPU replicas (one per
// node of newCPUCluster) keeping max models each. Its name is unique per
// run, so that -count > 1 sees fresh load logs.
func muxDeployment(name string, n, max int) serve.Deployment {
	res := ray.Resources{ray.CPU: 0.5}
	if n > 1 {
		res = ray.Resources{ray.CPU: 1, "tok": 1} // one per node
	}
	return serve.Deployment{
		Name:        name,
		Replica:     serve.Actor(muxClass, name, serve.Unary(muxCall), serve.Multiplexed(muxModels)),
		Resources:   res,
		MinReplicas: n, MaxConcurrentRequests: 8,
		Multiplex: &serve.Multiplex{MaxModelsPerReplica: max},
		Health:    &serve.HealthCheck{Period: time.Second},
	}
}

// postModel posts in to url naming model in the ModelIDHeader header.
func postModel(t testing.TB, client *http.Client, url, model string, in any) (int, []byte) {
	t.Helper()
	body, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(serve.ModelIDHeader, model)
	resp, err := client.Do(req)
	if err != nil {
		t.Errorf("POST %s: %v", url, err)
		return 0, nil
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

func callModel(t testing.TB, client *http.Client, base, name, model string) MuxOut {
	t.Helper()
	code, b := postModel(t, client, base+"/"+name, model, MuxIn{Text: "x"})
	if code != http.StatusOK {
		t.Fatalf("model %s: %d %s", model, code, b)
	}
	var out MuxOut
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func replicaModels(srv *serve.Server, name string) map[string][]string {
	out := map[string][]string{}
	d, _ := srv.Status().Deployment(name)
	for _, r := range d.Replicas {
		out[r.ID] = r.Models
	}
	return out
}

// Model multiplexing: a request names its model in the
// serve_multiplexed_model_id header (or a handle's WithModelID); the
// router sends it to a replica that has the model, else loads it on the
// replica with the fewest models; concurrent requests for a loading model
// wait for its one load; the least recently used idle model is evicted
// beyond MaxModelsPerReplica (with its unload hook), never one in use; a
// load error is the request's error with its status; per-model metrics.
func TestMultiplexing(t *testing.T) {
	c := newCPUCluster(t)
	srv := serve.New(c, nil)
	base, client := startServer(t, srv)
	run := newGate("mux") // unique per run: "mux#N"
	name := strings.ReplaceAll(run, "#", "-")
	is := is.New(t)
	is.NoErr(srv.Deploy(context.Background(), muxDeployment(name, 2, 2)))
	ev := muxLog(name)

	var hostA string
	t.Run("a model stays on the replica that loaded it", func(t *testing.T) {
		is := is.New(t)
		first := callModel(t, client, base, name, "a")
		is.Equal(first.Model, "a")
		is.Equal(first.Weights, "weights-of-a")
		hostA = first.Host
		for range 5 {
			is.Equal(callModel(t, client, base, name, "a").Host, hostA)
		}
		b := callModel(t, client, base, name, "b")
		is.True(b.Host != hostA) // the replica with the fewest models loads it
		loads, _ := ev.snapshot()
		is.Equal(loads, []string{"a", "b"})
	})

	t.Run("concurrent requests for a loading model wait for one load", func(t *testing.T) {
		is := is.New(t)
		slow := newGate("slow")
		var wg sync.WaitGroup
		hosts := make(chan string, 6)
		for range 6 {
			wg.Go(func() { hosts <- callModel(t, client, base, name, slow).Host })
		}
		gates.arrivals(t, slow, 1)
		waitStatus(t, srv, "six requests routed", func(st serve.Status) bool {
			n := 0
			for _, r := range dep(st, name).Replicas {
				n += r.Ongoing
			}
			return n == 6
		})
		gates.release(slow)
		wg.Wait()
		close(hosts)
		var seen []string
		for h := range hosts {
			if !slices.Contains(seen, h) {
				seen = append(seen, h)
			}
		}
		is.Equal(len(seen), 1) // all on the replica that loaded it
		ev.mu.Lock()
		is.Equal(ev.loadsByID[slow], 1)
		ev.mu.Unlock()
	})

	t.Run("the body cannot name another model", func(t *testing.T) {
		is := is.New(t)
		code, b := postModel(t, client, base+"/"+name, "a", map[string]string{"serve_multiplexed_model_id": "b"})
		is.Equal(code, 200)
		var out MuxOut
		is.NoErr(json.Unmarshal(b, &out))
		is.Equal(out.Model, "a")
		is.Equal(out.Host, hostA)
	})

	t.Run("handle WithModelID", func(t *testing.T) {
		is := is.New(t)
		h, err := serve.Handle[MuxIn, MuxOut](srv, name)
		is.NoErr(err)
		out, err := h.WithModelID("a").Call(context.Background(), MuxIn{})
		is.NoErr(err)
		is.Equal(out.Model, "a")
		is.Equal(out.Host, hostA)
		is.Equal(h.WithModelID("a").ModelID(), "a")
		// It crosses as JSON with its model.
		js, err := json.Marshal(h.WithModelID("b"))
		is.NoErr(err)
		var back serve.DeploymentHandle[MuxIn, MuxOut]
		is.NoErr(json.Unmarshal(js, &back))
		is.Equal(back.ModelID(), "b")
	})

	t.Run("a load error is the request's error", func(t *testing.T) {
		is := is.New(t)
		code, b := postModel(t, client, base+"/"+name, "missing", MuxIn{})
		is.Equal(code, http.StatusNotFound)
		is.True(strings.Contains(string(b), `load model \"missing\"`)) // names the model
		code, _ = postModel(t, client, base+"/"+name, "missing", MuxIn{})
		is.Equal(code, http.StatusNotFound) // a failed load is not kept: tried again
		code, b = postModel(t, client, base+"/"+name, "broken", MuxIn{})
		is.Equal(code, http.StatusInternalServerError)
		is.True(strings.Contains(string(b), "weights corrupt"))
		ev.mu.Lock()
		is.Equal(ev.loadsByID["missing"], 2)
		ev.mu.Unlock()
		for _, models := range replicaModels(srv, name) {
			is.True(!slices.Contains(models, "missing"))
		}
		long := strings.Repeat("m", 300)
		code, b = postModel(t, client, base+"/"+name, long, MuxIn{})
		is.Equal(code, http.StatusBadRequest)
		is.True(strings.Contains(string(b), "at most 256"))
	})

	t.Run("metrics per model", func(t *testing.T) {
		is := is.New(t)
		var buf bytes.Buffer
		srv.WriteMetrics(&buf)
		m := buf.String()
		for _, want := range []string{
			fmt.Sprintf(`goray_serve_model_loads_total{deployment=%q,model="a"} 1`, name),
			fmt.Sprintf(`goray_serve_model_requests_total{deployment=%q,model="a"} 8`, name), // 6, the body one, the handle one
			fmt.Sprintf(`goray_serve_model_load_failures_total{deployment=%q} 3`, name),
			fmt.Sprintf(`goray_serve_model_load_seconds_count{deployment=%q,model="b"} 1`, name),
			"# TYPE goray_serve_model_load_seconds histogram",
			"# TYPE goray_serve_replica_models_loaded gauge",
		} {
			if !strings.Contains(m, want) {
				t.Errorf("metrics lack %s in\n%s", want, grepLines(m, "model"))
			}
		}
		is.True(!strings.Contains(m, `model="missing"`)) // a model that never loaded makes no series
	})

	t.Run("least recently used idle model is evicted", func(t *testing.T) {
		is := is.New(t)
		lru := name + "-lru"
		is.NoErr(srv.Deploy(context.Background(), muxDeployment(lru, 1, 2)))
		lev := muxLog(lru)
		for _, id := range []string{"a", "b", "a", "c"} {
			callModel(t, client, base, lru, id)
		}
		loads, unloads := lev.snapshot()
		is.Equal(loads, []string{"a", "b", "c"})
		is.Equal(unloads, []string{"b"})
		for _, models := range replicaModels(srv, lru) {
			is.Equal(models, []string{"a", "c"}) // least recently used first
		}
		callModel(t, client, base, lru, "b")
		_, unloads = lev.snapshot()
		is.Equal(unloads, []string{"b", "a"})
		var buf bytes.Buffer
		srv.WriteMetrics(&buf)
		is.True(strings.Contains(buf.String(), fmt.Sprintf(`goray_serve_model_evictions_total{deployment=%q,model="b"} 1`, lru)))
		// Delete unloads the rest.
		is.NoErr(srv.Delete(context.Background(), lru))
		_, unloads = lev.snapshot()
		slices.Sort(unloads[2:])
		is.Equal(unloads, []string{"b", "a", "b", "c"})
	})

	t.Run("a model in use is not evicted", func(t *testing.T) {
		is := is.New(t)
		one := name + "-one"
		is.NoErr(srv.Deploy(context.Background(), muxDeployment(one, 1, 1)))
		oev := muxLog(one)
		g := newGate("busy")
		done := make(chan MuxOut, 1)
		go func() {
			code, b := postModel(t, client, base+"/"+one, "a", MuxIn{Gate: g})
			var out MuxOut
			if code != 200 || json.Unmarshal(b, &out) != nil {
				t.Errorf("gated request: %d %s", code, b)
			}
			done <- out
		}()
		gates.arrivals(t, g, 1)
		second := make(chan MuxOut, 1)
		go func() { second <- callModel(t, client, base, one, "b") }()
		waitStatus(t, srv, "b queued behind a", func(st serve.Status) bool { return dep(st, one).Queued == 1 })
		_, unloads := oev.snapshot()
		is.Equal(len(unloads), 0) // a is in use
		gates.release(g)
		is.Equal((<-done).Model, "a")
		is.Equal((<-second).Model, "b")
		_, unloads = oev.snapshot()
		is.Equal(unloads, []string{"a"})
		is.NoErr(srv.Delete(context.Background(), one))
	})

	t.Run("Models lists what is served", func(t *testing.T) {
		is := is.New(t)
		listed := name + "-listed"
		d := muxDeployment(listed, 1, 2)
		d.Models = []string{"llama", "qwen"}
		is.NoErr(srv.Deploy(context.Background(), d))
		code, b := postModel(t, client, base+"/"+listed, "gpt-9", MuxIn{})
		is.Equal(code, http.StatusNotFound)
		is.True(strings.Contains(string(b), `\"gpt-9\"`)) // names it
		is.Equal(callModel(t, client, base, listed, "qwen").Model, "qwen")
		h, err := serve.Handle[MuxIn, MuxOut](srv, listed)
		is.NoErr(err)
		_, err = h.WithModelID("gpt-9").Call(context.Background(), MuxIn{})
		is.True(errors.Is(err, serve.ErrNoDeployment) || ray.CodeOf(err) == ray.NotFound)
		is.True(strings.Contains(fmt.Sprint(err), "gpt-9"))

		// Another deployment cannot serve the same model ID.
		d2 := muxDeployment(name+"-dup", 1, 2)
		d2.Models = []string{"qwen"}
		err = srv.Deploy(context.Background(), d2)
		var fe *serve.FieldError
		is.True(errors.As(err, &fe))
		is.Equal(fe.Field, "Models")
		is.True(strings.Contains(err.Error(), listed))
		is.NoErr(srv.Delete(context.Background(), listed))
	})
}

// A wrong multiplexing configuration names the field.
func TestMultiplexFieldErrors(t *testing.T) {
	c, _ := newCluster(t, 1)
	srv := serve.New(c, nil)
	defer srv.Shutdown(context.Background())
	for _, tc := range []struct {
		field string
		edit  func(*serve.Deployment)
	}{
		{"Multiplex", func(d *serve.Deployment) { d.Replica = echoReplica("x"); d.Multiplex = &serve.Multiplex{} }},
		{"Multiplex.MaxModelsPerReplica", func(d *serve.Deployment) { d.Multiplex.MaxModelsPerReplica = -1 }},
		{"Multiplex.LoadTimeout", func(d *serve.Deployment) { d.Multiplex.LoadTimeout = -time.Second }},
		{"Models", func(d *serve.Deployment) { d.Models = []string{"a", ""} }},
		{"Models", func(d *serve.Deployment) { d.Models = []string{"a", "a"} }},
		{"Models", func(d *serve.Deployment) { d.Models = []string{"a\nb"} }},
	} {
		t.Run(tc.field, func(t *testing.T) {
			is := is.New(t)
			d := muxDeployment("bad", 1, 2)
			tc.edit(&d)
			err := srv.Deploy(context.Background(), d)
			var fe *serve.FieldError
			is.True(errors.As(err, &fe))
			is.Equal(fe.Field, tc.field)
			is.Equal(ray.CodeOf(err), ray.InvalidArgument)
			t.Log(err)
		})
	}
}

// A Process replica's server loads its own models: the router forwards
// the model ID in the header and routes by it, keeping the models it sent
// to each replica (MaxModelsPerReplica of them, least recently used
// forgotten first).
func TestMultiplexProcess(t *testing.T) {
	c := newCPUCluster(t)
	srv := serve.New(c, nil)
	base, client := startServer(t, srv)
	is := is.New(t)
	exe, err := os.Executable()
	is.NoErr(err)
	is.NoErr(srv.Deploy(context.Background(), serve.Deployment{
		Name: "proc",
		Replica: serve.Process(serve.ProcessSpec{
			Command: []string{exe, "-test.run=^$"}, StopTimeout: 5 * time.Second,
			Env: map[string]string{"SERVE_TEST_SERVER": "1", "SERVE_TEST_STATE": t.TempDir()},
		}),
		Resources:   ray.Resources{ray.CPU: 3},
		MinReplicas: 2,
		Multiplex:   &serve.Multiplex{MaxModelsPerReplica: 1},
		Models:      []string{"a", "b"},
	}))
	where := func(model string) string {
		code, b := postModel(t, client, base+"/proc/echo", model, map[string]string{})
		is.Equal(code, 200)
		var out map[string]string
		is.NoErr(json.Unmarshal(b, &out))
		is.Equal(out["model"], model) // the server gets the header
		return out["listen"]
	}
	a := where("a")
	for range 4 {
		is.Equal(where("a"), a)
	}
	b := where("b")
	is.True(b != a)
	is.Equal(where("b"), b)
	code, body := postModel(t, client, base+"/proc/echo", "c", map[string]string{})
	is.Equal(code, http.StatusNotFound)
	is.True(strings.Contains(string(body), `\"c\"`))
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for line := range strings.Lines(s) {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "")
}

// A request waiting for a model's load on a replica whose node dies is
// retried on another replica of an Idempotent deployment, which loads the
// model in turn.
func TestMultiplexLoadOnLostReplica(t *testing.T) {
	is := is.New(t)
	b, err := local.New(local.ClusterSpec{
		Nodes: []local.NodeSpec{{Name: "cpu", Count: 3, Resources: backend.Resources{backend.CPU: 4, "tok": 1}}},
	}, nil)
	is.NoErr(err)
	c, err := ray.NewCluster(context.Background(), b, nil)
	is.NoErr(err)
	t.Cleanup(func() { c.Close() })
	srv := serve.New(c, nil)
	base, client := startServer(t, srv)
	name := strings.ReplaceAll(newGate("lost"), "#", "-")
	d := muxDeployment(name, 2, 2)
	d.Idempotent = true
	is.NoErr(srv.Deploy(context.Background(), d))

	slow := newGate("slow")
	got := make(chan MuxOut, 1)
	go func() { got <- callModel(t, client, base, name, slow) }()
	gates.arrivals(t, slow, 1)
	var dead string
	for _, r := range dep(srv.Status(), name).Replicas {
		if slices.Contains(r.Models, slow) {
			dead = r.Hosts[0]
		}
	}
	is.True(dead != "")
	is.NoErr(b.KillNode(context.Background(), dead))
	gates.arrivals(t, slow, 1) // loading again, on another replica
	gates.release(slow)
	out := <-got
	is.Equal(out.Model, slow)
	is.True(out.Host != dead)
	ev := muxLog(name)
	ev.mu.Lock()
	is.Equal(ev.loadsByID[slow], 2)
	ev.mu.Unlock()
}
