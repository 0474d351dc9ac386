package ray

import (
	"fmt"
	"maps"
	"slices"

	"github.com/goray-dev/goray/backend"
)

// Resource names for [Resources].
const (
	// CPU is CPU cores; tasks ask for 1 unless told otherwise.
	CPU = backend.CPU
	// Memory is bytes of memory.
	Memory = backend.Memory
	// TPU is TPU chips.
	TPU = backend.TPU
)

// Resources is a per-call option naming the resources a task or actor holds
// while it runs: [CPU], [Memory], [TPU] and custom names. Only the keys given
// change the defaults (tasks default to {CPU: 1}, actors to {}), so
// Resources{TPU: 4} asks for 1 CPU and 4 chips and Resources{CPU: 0} asks for
// nothing. Amounts may be fractional and must not be negative, except
// [TPU]: as in Ray (TPUAcceleratorManager.validate_resource_request_quantity),
// a task or actor asks for 0, 1, 2, 4 or 8 chips of one host, the chip
// counts a process can be given bounds for; other amounts are refused
// with InvalidArgument. Fewer chips than the host has are chips of its own
// (see the package doc).
type Resources map[string]float64

// tpuChipOptions are the TPU amounts a task or actor may ask for, Ray's
// TPU_VALID_CHIP_OPTIONS.
var tpuChipOptions = []float64{1, 2, 4, 8}

func (r Resources) optionErr() error {
	v, ok := r[TPU]
	if !ok || v == 0 || !backend.ValidAmount(v) || slices.Contains(tpuChipOptions, v) {
		return nil // an invalid amount is the backend's to word
	}
	return fmt.Errorf("TPU %v is not a chip count a task or actor can hold; valid: 1, 2, 4 or 8 chips of one host (as in Ray), or 0", v)
}

// invalidOption is implemented by options whose value can be wrong; the
// submission then fails with InvalidArgument instead of ignoring them.
type invalidOption interface{ optionErr() error }

// optionsErr returns the first option error of opts, as InvalidArgument.
func optionsErr[O any](op string, opts []O) error {
	for _, o := range opts {
		if v, ok := any(o).(invalidOption); ok {
			if err := v.optionErr(); err != nil {
				return backend.Errorf(backend.InvalidArgument, op, "%w", err)
			}
		}
	}
	return nil
}

// TaskOption is an option of a task call.
type TaskOption interface{ applyTask(*backend.TaskSpec) }

// ActorOption is an option of an actor creation.
type ActorOption interface{ applyActor(*actorConfig) }

type actorConfig struct {
	sched          backend.Scheduling
	maxRestarts    int
	maxConcurrency int
	maxTaskRetries int
	name           string
}

// DefaultTaskRetries is how many times a task is retried after a system
// failure (its node died) unless [Retries] says otherwise; as in Ray.
const DefaultTaskRetries = 3

func (r Resources) applyTask(s *backend.TaskSpec) {
	s.Scheduling.Resources = mergeResources(s.Scheduling.Resources, r)
}
func (r Resources) applyActor(c *actorConfig) {
	c.sched.Resources = mergeResources(c.sched.Resources, r)
}

func mergeResources(base backend.Resources, r Resources) backend.Resources {
	out := make(backend.Resources, len(base)+len(r))
	maps.Copy(out, base)
	for k, v := range r {
		out[k] = v
	}
	return out
}

// NodeSelector is a per-call option restricting the nodes a task or actor
// may run on, by node label. Values use Ray's syntax: "v", "!v", "in(a,b)",
// "!in(a,b)". See backend.LabelSelector.
type NodeSelector map[string]string

func (s NodeSelector) applyTask(t *backend.TaskSpec) {
	t.Scheduling.NodeSelector = backend.LabelSelector(maps.Clone(s))
}
func (s NodeSelector) applyActor(c *actorConfig) {
	c.sched.NodeSelector = backend.LabelSelector(maps.Clone(s))
}

// Retries sets how many times a task is retried after a system failure
// (Unavailable: its node or worker died). Negative retries forever; 0
// never retries. Without it a task is retried [DefaultTaskRetries] (3)
// times, as in Ray.
type Retries int

func (r Retries) applyTask(s *backend.TaskSpec) { s.MaxRetries = int(r) }

// RetryOnError is a task option: when true, a task whose code returns an
// error or panics is retried too, within the same [Retries] budget.
type RetryOnError bool

func (r RetryOnError) applyTask(s *backend.TaskSpec) { s.RetryOnError = bool(r) }

// Name names a task call (for state snapshots) or an actor (actor names are
// unique among live actors and let [GetActor] find it).
type Name string

func (n Name) applyTask(s *backend.TaskSpec) { s.DisplayName = string(n) }
func (n Name) applyActor(c *actorConfig)     { c.name = string(n) }

// MaxRestarts is an actor option: how many times the actor is restarted
// after its node dies. Negative restarts forever. The default is 0.
type MaxRestarts int

func (m MaxRestarts) applyActor(c *actorConfig) { c.maxRestarts = int(m) }

// MaxConcurrency is an actor option: how many calls run at once. The default,
// 1, runs calls one at a time in submission order. Values below 1 are an
// InvalidArgument error.
type MaxConcurrency int

func (m MaxConcurrency) optionErr() error {
	if m < 1 {
		return fmt.Errorf("MaxConcurrency(%d): must be at least 1 (1 runs calls one at a time)", int(m))
	}
	return nil
}

func (m MaxConcurrency) applyActor(c *actorConfig) { c.maxConcurrency = int(m) }

// MaxTaskRetries is an actor option: how many times a call lost to a failure
// is retried on the restarted actor. The default is 0.
type MaxTaskRetries int

func (m MaxTaskRetries) applyActor(c *actorConfig) { c.maxTaskRetries = int(m) }

// InBundle returns an option that pins a task or actor to bundle index of pg
// (index -1 means any bundle of pg). The work's resources must fit in the
// bundle's. A nil pg is an InvalidArgument error of the submission.
func InBundle(pg *PlacementGroup, index int) PlacementOption {
	return PlacementOption{pg: pg, index: index}
}

// PlacementOption pins work into a placement group bundle; see [InBundle].
type PlacementOption struct {
	pg    *PlacementGroup
	index int
}

func (p PlacementOption) optionErr() error {
	if p.pg == nil {
		return fmt.Errorf("InBundle(nil, %d): nil placement group", p.index)
	}
	return nil
}

func (p PlacementOption) placement() backend.Placement {
	if p.pg == nil {
		return backend.Placement{Bundle: -1}
	}
	return backend.Placement{Group: p.pg.id, Bundle: p.index}
}

func (p PlacementOption) applyTask(s *backend.TaskSpec) { s.Scheduling.Placement = p.placement() }
func (p PlacementOption) applyActor(c *actorConfig)     { c.sched.Placement = p.placement() }

// String renders the amounts sorted by name, e.g. "{CPU: 1, TPU: 4}".
func (r Resources) String() string { return backend.Resources(r).String() }
