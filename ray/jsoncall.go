package ray

import (
	"context"
	"encoding/json"
	"runtime"

	"github.com/goray-dev/goray/backend"
)

// CallJSON calls the method on the actor with its input given as JSON,
// waits for the call, and returns the output as JSON: for a program that
// holds the input encoded already and wants the output encoded, such as an
// HTTP router passing request bodies through. With the cluster's codec
// JSON (the default), in crosses to the actor as it is and the output's
// encoding comes back as the actor encoded it, so the caller decodes and
// encodes neither; the actor decodes in into I as for [Method.Remote]
// (case-insensitive field names, unknown fields ignored). With another
// codec, in is decoded into I here and the output encoded to JSON here.
//
// in must not be modified until CallJSON returns, and the output must not
// be modified: it may be the backend's own copy of the object. Errors are
// those of Remote and Get; a call whose ctx ends before its output is
// ready is cancelled (as [ObjectRef.Cancel] does) and CallJSON returns
// ctx's error.
func (m *Method[A, I, O]) CallJSON(ctx context.Context, h *ActorHandle[A], in []byte) ([]byte, error) {
	return m.callJSON(ctx, h, in, nil)
}

// CallJSONDecoded is [Method.CallJSON] for a caller that has decoded in
// already (with encoding/json, into decoded): an actor that runs in this
// process (the simulator's goroutines) takes decoded as its input instead
// of decoding in again; one in another process (a worker process, a pod)
// gets in, as with CallJSON. decoded must be what in decodes to. The
// method then shares what decoded refers to (its slices, maps and
// pointers) with the caller: the caller must not use decoded after the
// call, nor pass the same value to another call.
func (m *Method[A, I, O]) CallJSONDecoded(ctx context.Context, h *ActorHandle[A], in []byte, decoded I) ([]byte, error) {
	if h.c != nil {
		if nv, ok := h.c.b.(backend.NativeValues); ok && nv.SupportsNativeValues() {
			return m.callJSON(ctx, h, in, decoded)
		}
	}
	return m.callJSON(ctx, h, in, nil)
}

// callJSON is CallJSON, with the decoded input to set beside the encoded
// one in the call's value, or nil.
func (m *Method[A, I, O]) callJSON(ctx context.Context, h *ActorHandle[A], in []byte, decoded any) ([]byte, error) {
	if err := h.Err(); err != nil {
		return nil, err
	}
	c := h.c
	if err := c.checkCtx(ctx, m.op); err != nil {
		return nil, err
	}
	if _, ok := c.codec.(jsonCodec); !ok {
		return m.callJSONConverted(ctx, h, in)
	}
	arg := backend.Arg{Value: backend.Value{Data: in, Native: decoded}}
	var v backend.Value
	var err error
	if w, ok := c.b.(backend.ActorCallWaiter); ok {
		// One step, on this goroutine when the call can start at once.
		v, err = w.CallActorWait(ctx, m.callSpec(h), arg)
	} else {
		ref := m.call(ctx, h, arg)
		if err := ref.Err(); err != nil {
			return nil, err
		}
		v, err = c.b.Get(ctx, ref.s.id)
		if ctx.Err() != nil && err != nil {
			_ = ref.Cancel(context.WithoutCancel(ctx))
		}
		runtime.KeepAlive(ref.s)
	}
	if err != nil {
		return nil, err
	}
	if v.Data == nil && v.Native != nil {
		return json.Marshal(v.Native)
	}
	return v.Data, nil
}

// callJSONConverted is CallJSON on a cluster whose codec is not JSON.
func (m *Method[A, I, O]) callJSONConverted(ctx context.Context, h *ActorHandle[A], in []byte) ([]byte, error) {
	var x I
	if err := json.Unmarshal(in, &x); err != nil {
		return nil, backend.Errorf(backend.InvalidArgument, m.op, "input is not a JSON %T: %w", x, err)
	}
	ref := m.Remote(ctx, h, x)
	out, err := ref.Get(ctx)
	if err != nil {
		if ctx.Err() != nil {
			_ = ref.Cancel(context.WithoutCancel(ctx))
		}
		return nil, err
	}
	return json.Marshal(out)
}

// callSpec is the spec of a call of m on h: the handle's shared one for
// the method called last when it keeps one (see Method.call).
func (m *Method[A, I, O]) callSpec(h *ActorHandle[A]) *backend.CallSpec {
	if h.calls == nil {
		return &backend.CallSpec{Actor: h.id, Class: m.class, Method: m.name}
	}
	spec := h.calls.last.Load()
	if spec == nil || spec.Method != m.name || spec.Class != m.class {
		spec = &backend.CallSpec{Actor: h.id, Class: m.class, Method: m.name}
		h.calls.last.Store(spec)
	}
	return spec
}
