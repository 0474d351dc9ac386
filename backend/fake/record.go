package fake

import (
	"fmt"
	"maps"
	"reflect"
	"slices"

	"github.com/goray-dev/goray/backend"
)

// Kind names the backend method a [Call] records.
type Kind string

// The kinds of calls. The comment of each says what [Call.Name] holds.
const (
	// KindTask is a task attempt (SubmitTask); Name is the task name.
	KindTask Kind = "task"
	// KindActor is an actor creation (CreateActor); Name is the class.
	KindActor Kind = "actor"
	// KindMethod is an actor method call (CallActor); Name is
	// "class.method".
	KindMethod Kind = "method"
	// KindPut is a Put; Name is empty.
	KindPut Kind = "put"
	// KindGet is a Get; Name is empty.
	KindGet Kind = "get"
	// KindWait is a Wait; Name is empty.
	KindWait Kind = "wait"
	// KindActorReady is an ActorReady; Name is the actor's class.
	KindActorReady Kind = "actorReady"
	// KindKill is a KillActor; Name is the actor's class.
	KindKill Kind = "kill"
	// KindNamedActor is a NamedActor lookup; Name is the name looked up.
	KindNamedActor Kind = "namedActor"
	// KindPlacementGroup is a CreatePlacementGroup; Name is the group's
	// name.
	KindPlacementGroup Kind = "placementGroup"
	// KindPlacementGroupReady is a PlacementGroupReady; Name is the group's
	// name.
	KindPlacementGroupReady Kind = "placementGroupReady"
	// KindRemovePlacementGroup is a RemovePlacementGroup; Name is the
	// group's name.
	KindRemovePlacementGroup Kind = "removePlacementGroup"
	// KindAny matches every kind in [Backend.PrependReactor].
	KindAny Kind = "*"
)

// Call is the record of one backend call, or of one attempt of a task.
// Fields that do not apply to the call's kind are zero. The spec pointers
// point to the fake's own copies, shared between the attempts of a task;
// treat them as read-only.
//
// The zero value is an empty record. A Call is a plain value, safe to read
// from any goroutine once returned by [Backend.Calls].
type Call struct {
	// Kind is the method called.
	Kind Kind
	// Name is the task, "class.method", class, group or actor name; see
	// [Kind].
	Name string
	// Attempt is the 0-based attempt of a task.
	Attempt int
	// Ran reports whether the work ran: the user code, or a script or
	// reactor in its place. It is false for a rejected submission and for
	// work failed by its input or its dead actor without running.
	Ran bool
	// Arg is the input the work received (for a ref input, the referenced
	// value), or the value a put stored.
	Arg backend.Value
	// Ref is the object the input was passed as, or 0.
	Ref backend.ObjectID
	// Object is the result object of a task, method call or put, or the
	// object of a get.
	Object backend.ObjectID
	// Objects are the objects of a wait.
	Objects []backend.ObjectID
	// Actor is the actor created, called, killed, waited for or found.
	Actor backend.ActorID
	// Group is the placement group created, waited for or removed, or the
	// group the work runs in.
	Group backend.PlacementGroupID
	// Bundle is the bundle index the work runs in when Group is set, never
	// -1: the fake picks the first bundle that fits.
	Bundle int
	// TaskSpec, ActorSpec, CallSpec and GroupSpec are copies of the spec
	// the call was given.
	TaskSpec  *backend.TaskSpec
	ActorSpec *backend.ActorSpec
	CallSpec  *backend.CallSpec
	GroupSpec *backend.PlacementGroupSpec
	// Result is the value the work returned, or the value a get returned.
	Result backend.Value
	// Err is the call's error: a rejection, the failure of this attempt,
	// or the error a get returned.
	Err error

	codec Codec
}

// DecodeArg decodes c.Arg into the value out points to, with the fake's
// codec (or, for an unencoded value, by assignment).
func (c Call) DecodeArg(out any) error { return decodeValue(c.codec, c.Arg, out) }

// DecodeResult decodes c.Result like [Call.DecodeArg].
func (c Call) DecodeResult(out any) error { return decodeValue(c.codec, c.Result, out) }

func decodeValue(codec Codec, v backend.Value, out any) error {
	p := reflect.ValueOf(out)
	if p.Kind() != reflect.Pointer || p.IsNil() {
		return fmt.Errorf("fake: decode into %T: want a non-nil pointer", out)
	}
	switch {
	case v.Data != nil:
		if codec == nil {
			codec = jsonCodec{}
		}
		if err := codec.Unmarshal(v.Data, out); err != nil {
			return fmt.Errorf("fake: decode %T: %w", out, err)
		}
		return nil
	case v.Native != nil:
		nv := reflect.ValueOf(v.Native)
		if !nv.Type().AssignableTo(p.Elem().Type()) {
			return fmt.Errorf("fake: decode: have %T, want %v", v.Native, p.Elem().Type())
		}
		p.Elem().Set(nv)
		return nil
	default:
		return fmt.Errorf("fake: decode %T: the call has no such value", out)
	}
}

// Calls returns the call log, oldest first.
func (b *Backend) Calls() []Call {
	return b.filter(func(*Call) bool { return true })
}

// CallsTo returns the calls whose Name is name (a task name, "class.method",
// a class...), oldest first.
func (b *Backend) CallsTo(name string) []Call {
	return b.filter(func(c *Call) bool { return c.Name == name })
}

// CallsOf returns the calls of one kind, oldest first.
func (b *Backend) CallsOf(kind Kind) []Call {
	return b.filter(func(c *Call) bool { return c.Kind == kind })
}

func (b *Backend) filter(keep func(*Call) bool) []Call {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []Call
	for _, c := range b.calls {
		if keep(c) {
			out = append(out, *c)
		}
	}
	return out
}

// ClearCalls empties the call log. Scripts, reactors and the cluster's state
// stay.
func (b *Backend) ClearCalls() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls = nil
}

// Reset empties the call log and removes every script and reactor. The
// cluster's state (objects, actors, placement groups) stays.
func (b *Backend) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls = nil
	b.scripts = nil
	b.reactors = nil
}

// recordLocked appends a record and returns it, so that its outcome can be
// filled in later (a record dropped by Reset meanwhile is simply lost).
// b.mu must be held.
func (b *Backend) recordLocked(c Call) *Call {
	c.codec = b.codec()
	p := &c
	b.calls = append(b.calls, p)
	return p
}

// finishLocked fills in a record's outcome. b.mu must be held.
func (c *Call) finishLocked(v backend.Value, err error) {
	c.Result, c.Err = v, err
}

func cloneScheduling(s backend.Scheduling) backend.Scheduling {
	s.Resources = s.Resources.Clone()
	s.NodeSelector = maps.Clone(s.NodeSelector)
	return s
}

func cloneTaskSpec(s *backend.TaskSpec) *backend.TaskSpec {
	c := *s
	c.Scheduling = cloneScheduling(s.Scheduling)
	return &c
}

func cloneActorSpec(s *backend.ActorSpec) *backend.ActorSpec {
	c := *s
	c.Scheduling = cloneScheduling(s.Scheduling)
	return &c
}

func cloneCallSpec(s *backend.CallSpec) *backend.CallSpec {
	c := *s
	return &c
}

func cloneGroupSpec(s *backend.PlacementGroupSpec) *backend.PlacementGroupSpec {
	c := *s
	c.Bundles = slices.Clone(s.Bundles)
	for i, bu := range c.Bundles {
		c.Bundles[i] = backend.Bundle{
			Resources:     bu.Resources.Clone(),
			LabelSelector: maps.Clone(bu.LabelSelector),
			Env:           maps.Clone(bu.Env),
		}
	}
	return &c
}
