package ray_test

import (
	"bytes"
	"context"
	"encoding/json"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/ray"
)

type jsonCallIn struct {
	Text string
	Gate string `json:",omitempty"` // wait for jsonCallGates[Gate] (or the context's end)
	// Poll: wait for the context's end by asking its Err, never its Done;
	// Derive: by a context derived from it.
	Poll, Derive bool `json:",omitempty"`
}

type jsonCallOut struct {
	Text      string
	Goroutine uint64
}

// jsonCallGates holds the gates of the calls (name → chan struct{}).
var jsonCallGates sync.Map

func jsonCallGate(name string) chan struct{} {
	g, _ := jsonCallGates.LoadOrStore(name, make(chan struct{}))
	return g.(chan struct{})
}

var jsonCallSeq atomic.Int64

// jsonCallStarted receives one value per call that reached its gate.
var jsonCallStarted = make(chan struct{}, 16)

var (
	jsonCallClass = ray.NewActorClass("test.jsonCall", func(ctx context.Context, prefix string) (string, error) { return prefix, nil })
	jsonCallEcho  = ray.NewMethod(jsonCallClass, "echo", func(ctx context.Context, prefix string, in jsonCallIn) (jsonCallOut, error) {
		switch {
		case in.Poll:
			jsonCallStarted <- struct{}{}
			for ctx.Err() == nil {
				time.Sleep(time.Millisecond)
			}
			return jsonCallOut{}, ctx.Err()
		case in.Derive:
			jsonCallStarted <- struct{}{}
			dctx, cancel := context.WithCancel(ctx)
			defer cancel()
			<-dctx.Done()
			return jsonCallOut{}, dctx.Err()
		}
		if in.Gate != "" {
			jsonCallStarted <- struct{}{}
			select {
			case <-jsonCallGate(in.Gate):
			case <-ctx.Done():
				return jsonCallOut{}, ctx.Err()
			}
		}
		return jsonCallOut{Text: prefix + in.Text, Goroutine: goroutineID()}, nil
	})
)

// goroutineID is the running goroutine's number, from its stack's header
// ("goroutine 7 [running]:").
func goroutineID() uint64 {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	buf, _ = bytes.CutPrefix(buf, []byte("goroutine "))
	id, _ := strconv.ParseUint(string(buf[:bytes.IndexByte(buf, ' ')]), 10, 64)
	return id
}

// CallJSON passes JSON in and out; on the simulator a call that can start
// at once runs on the caller's goroutine, one that must wait for the
// actor's slot runs on another, and a caller whose context ends cancels
// the call; with another codec than JSON the bytes are converted.
func TestCallJSON(t *testing.T) {
	ctx := context.Background()
	c := localCluster(t, nil)
	h := jsonCallClass.Remote(ctx, c, "v1:", ray.MaxConcurrency(1))
	if err := h.Ready(ctx); err != nil { // a call to an actor still starting waits
		t.Fatal(err)
	}
	decode := func(t *testing.T, b []byte) jsonCallOut {
		var out jsonCallOut
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("output %q: %v", b, err)
		}
		return out
	}

	t.Run("on the caller's goroutine", func(t *testing.T) {
		is := is.New(t)
		b, err := jsonCallEcho.CallJSON(ctx, h, []byte(`{"text": "hi"}`)) // field names match as Remote's do
		is.NoErr(err)
		out := decode(t, b)
		is.Equal(out.Text, "v1:hi")
		is.Equal(out.Goroutine, goroutineID())
	})

	t.Run("after a call that holds the actor's slot", func(t *testing.T) {
		is := is.New(t)
		gate := "held-" + strconv.FormatInt(jsonCallSeq.Add(1), 10)
		held := jsonCallEcho.Remote(ctx, h, jsonCallIn{Text: "first", Gate: gate})
		<-jsonCallStarted
		type result struct {
			b   []byte
			err error
		}
		done := make(chan result, 1)
		go func() {
			b, err := jsonCallEcho.CallJSON(ctx, h, []byte(`{"Text":"second"}`))
			done <- result{b, err}
		}()
		close(jsonCallGate(gate))
		first, err := held.Get(ctx)
		is.NoErr(err)
		is.Equal(first.Text, "v1:first")
		r := <-done
		is.NoErr(r.err)
		is.Equal(decode(t, r.b).Text, "v1:second")
	})

	t.Run("the caller's context ends", func(t *testing.T) {
		is := is.New(t)
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := jsonCallEcho.CallJSON(cctx, h, []byte(`{"Text":"x","Gate":"never"}`))
			done <- err
		}()
		<-jsonCallStarted // running: on the caller's goroutine, the actor being idle
		cancel()
		is.Equal(<-done, context.Canceled)
		b, err := jsonCallEcho.CallJSON(ctx, h, []byte(`{"Text":"after"}`)) // the slot is free again
		is.NoErr(err)
		is.Equal(decode(t, b).Text, "v1:after")
	})

	t.Run("the caller's context ends, the call asks Err or derives", func(t *testing.T) {
		// The call's context follows its caller's however the method
		// looks: Err alone (no Done channel asked for), or a context
		// derived from it; by the deadline too.
		for _, in := range []string{`{"Poll":true}`, `{"Derive":true}`} {
			is := is.New(t)
			cctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				_, err := jsonCallEcho.CallJSON(cctx, h, []byte(in))
				done <- err
			}()
			<-jsonCallStarted
			cancel()
			is.Equal(<-done, context.Canceled)
			dctx, dcancel := context.WithTimeout(ctx, 50*time.Millisecond)
			_, err := jsonCallEcho.CallJSON(dctx, h, []byte(in))
			dcancel()
			select { // it ran unless the deadline passed first
			case <-jsonCallStarted:
			default:
			}
			is.Equal(err, context.DeadlineExceeded)
		}
	})

	t.Run("decoded already", func(t *testing.T) {
		// An in-process actor takes the decoded value and decodes nothing
		// (here the value and the bytes differ, to see which was taken);
		// with another codec the bytes are converted as for CallJSON.
		is := is.New(t)
		b, err := jsonCallEcho.CallJSONDecoded(ctx, h, []byte(`{"Text":"bytes"}`), jsonCallIn{Text: "value"})
		is.NoErr(err)
		is.Equal(decode(t, b).Text, "v1:value")
		c := localCluster(t, nil, &ray.Options{Codec: otherJSON{}})
		h2 := jsonCallClass.Remote(ctx, c, "v2:")
		b, err = jsonCallEcho.CallJSONDecoded(ctx, h2, []byte(`{"Text":"bytes"}`), jsonCallIn{Text: "value"})
		is.NoErr(err)
		is.Equal(decode(t, b).Text, "v2:bytes")
	})

	t.Run("another codec", func(t *testing.T) {
		is := is.New(t)
		c := localCluster(t, nil, &ray.Options{Codec: otherJSON{}})
		h := jsonCallClass.Remote(ctx, c, "v2:")
		b, err := jsonCallEcho.CallJSON(ctx, h, []byte(`{"Text":"hi"}`))
		is.NoErr(err)
		is.Equal(decode(t, b).Text, "v2:hi")
		_, err = jsonCallEcho.CallJSON(ctx, h, []byte(`{"Text":`))
		is.Equal(ray.CodeOf(err), ray.InvalidArgument)
	})
}

// otherJSON is a codec other than ray.JSON (it encodes the same way).
type otherJSON struct{}

func (otherJSON) Name() string                       { return "other-json" }
func (otherJSON) Marshal(v any) ([]byte, error)      { return json.Marshal(v) }
func (otherJSON) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
