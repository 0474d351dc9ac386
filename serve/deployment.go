package serve

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/tpu"
)

// Deployment describes one HTTP-served model: what a replica runs, the TPU
// slice each replica owns, and how many replicas may run.
//
// Each replica reserves one whole slice of Accelerator and Topology with
// ray.NewSlicePlacementGroup and runs one worker per host of it; host 0
// serves requests. With ChipsPerReplica, a replica holds some chips of
// one host instead, and replicas share hosts. The zero value is not valid: Name, Replica, Accelerator
// and Topology are required.
type Deployment struct {
	// Name names the deployment and its route: /<Name>. Letters, digits,
	// '-', '_' and '.', starting with a letter or digit.
	Name string
	// Replica is what each replica runs: an actor class ([Actor]) or an
	// external HTTP server process ([Process]).
	Replica Replica

	// Accelerator and Topology are the TPU slice of each replica, as in
	// ray.SliceSpec ("v6e", "4x4"); ChipsPerVM resolves ambiguous shapes
	// such as v6e 2x4.
	Accelerator string
	Topology    string
	ChipsPerVM  int
	// ChipsPerReplica, when set, makes each replica hold that many chips
	// of one host instead of a whole slice: the topology must be one host
	// (such as v6e 2x2 or 2x4), and the count 1, 2, 4 or 8 (Ray's chip
	// counts of a process), fewer than the host's chips. Replicas may then share a host, each with chips of its own
	// and Ray's TPU_VISIBLE_CHIPS for them in its env (with the chip and
	// host bounds for 1 or 2 chips), as Ray Serve replicas with
	// ray_actor_options {"resources": {"TPU": 1}} get: four replicas of
	// one chip fill a v6e 2x2 host. 0 means whole slices.
	ChipsPerReplica int
	// Resources, when set, makes each replica hold these resources of one
	// node instead of TPU chips (a CPU deployment: a tokenizer, a router
	// or embedding model, a guard model next to the TPU replicas), as Ray
	// Serve's ray_actor_options {"num_cpus": 2, "memory": ...}: a placement
	// group of one bundle of them, which the replica's actor or process
	// runs in, with the same router, autoscaling, health checks, retries
	// and metrics. Accelerator, Topology, ChipsPerVM and ChipsPerReplica
	// must then be unset; TPU is not a resource of these (use
	// ChipsPerReplica).
	Resources ray.Resources

	// MinReplicas and MaxReplicas bound the number of replicas (slices).
	// MinReplicas 0 means 1; MaxReplicas 0 means MinReplicas.
	MinReplicas, MaxReplicas int
	// MaxConcurrentRequests is how many requests one replica handles at
	// once; 0 means 8.
	MaxConcurrentRequests int
	// MaxQueuedRequests is how many requests wait in the router when every
	// replica is at its limit; more are refused with 503 and Retry-After.
	// 0 means 4 per replica of MaxReplicas; negative means no queue.
	MaxQueuedRequests int
	// Idempotent marks requests safe to repeat: a request whose replica
	// dies is retried on another replica. Streams are repeated and the
	// chunks the client already has are skipped, so an idempotent stream
	// must send the same chunks each time.
	Idempotent bool
	// MaxRetries bounds the retries of one idempotent request; 0 means 3.
	MaxRetries int
	// RequestTimeout bounds one request, queueing included; 0 means 60s.
	// A stream's timeout is 10 times it. A request to a Process replica,
	// whose body streams to the replica's server, does not count the time
	// spent waiting for the client's body (Options.BodyTimeout bounds it).
	RequestTimeout time.Duration
	// AllowUnknownFields accepts a JSON request body (of an actor's
	// Unary, Batched or Streaming endpoint) with fields its input type
	// lacks, ignoring them. By default such a body is refused with 400
	// naming the field, so that a misspelt field ({"txt": ...}) is not
	// taken for an empty one; trailing data after the JSON value is
	// refused either way.
	AllowUnknownFields bool

	// Multiplex routes requests by model ID (Ray Serve's model
	// multiplexing): a request names its model in the ModelIDHeader header
	// (or with [DeploymentHandle.WithModelID]); the router prefers a
	// replica that has it loaded and otherwise picks one to load it. nil
	// means off, unless the actor has a [Multiplexed] endpoint (then the
	// defaults of Multiplex).
	Multiplex *Multiplex
	// Models lists the model IDs the deployment serves: the OpenAI front
	// lists them at GET /v1/models and routes a request whose "model" is
	// one of them here. On a multiplexed deployment a request naming
	// another model is answered 404; with Models empty, any model ID is
	// passed to the loader. A model ID may be served by one deployment of
	// a server only.
	Models []string

	// Autoscaling scales between MinReplicas and MaxReplicas; nil keeps
	// MinReplicas.
	Autoscaling *Autoscaling
	// Health configures health checks; nil means the defaults.
	Health *HealthCheck
	// DrainTimeout bounds how long a replica being removed waits for its
	// requests; 0 means RequestTimeout.
	DrainTimeout time.Duration
	// RollingUpdate says how a Deploy of this Deployment replaces the
	// version of the name that is running: how many replicas may be added
	// beyond MinReplicas while it does, and how many of MinReplicas may be
	// unavailable. nil means MaxSurge MinReplicas and MaxUnavailable 0:
	// the whole new version starts beside the old one.
	RollingUpdate *RollingUpdate
}

// RollingUpdate bounds a rolling update as a Kubernetes Deployment's
// rollingUpdate strategy does, in replicas (not percentages), with
// MinReplicas of the new version as the desired count: the old and new
// versions' replicas together never hold more than MinReplicas+MaxSurge
// slices (or chips, or resources), and at least MinReplicas-MaxUnavailable
// replicas are ready throughout. MaxSurge 1 and MaxUnavailable 0 replace
// replicas one at a time, so that the cluster needs room for one replica
// more than the deployment, not for both versions.
type RollingUpdate struct {
	// MaxSurge is how many replicas may run above MinReplicas during the
	// update; 0 means none (then MaxUnavailable must be at least 1).
	MaxSurge int
	// MaxUnavailable is how many of MinReplicas may be not ready during
	// the update; 0 means none (then MaxSurge must be at least 1).
	MaxUnavailable int
}

// Autoscaling scales a deployment by whole slices on the requests ongoing
// per replica (in flight plus queued, averaged over ready replicas). Its
// zero value means the defaults of each field.
type Autoscaling struct {
	// TargetOngoingRequests is the ongoing requests per replica to aim for;
	// 0 means half of MaxConcurrentRequests.
	TargetOngoingRequests float64
	// UpscaleDelay is how long the load must call for more replicas before
	// they are added; DownscaleDelay the same for fewer. 0 means 0s and
	// 60s.
	UpscaleDelay, DownscaleDelay time.Duration
	// Interval is how often the load is sampled; 0 means 1s.
	Interval time.Duration
}

// HealthCheck configures the periodic health checks of replicas. Its zero
// value means the defaults of each field.
type HealthCheck struct {
	// Period between checks; 0 means 5s. A replica whose last check is
	// still running at a Period's tick is checked again once it ends;
	// every replica's checks run independently of the others'.
	Period time.Duration
	// Timeout of one check, which then counts as failed; 0 means Period.
	Timeout time.Duration
	// FailureThreshold is how many checks in a row must fail before the
	// replica is replaced; 0 means 3.
	FailureThreshold int
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// normalize validates d and fills in its defaults. Each error has code
// InvalidArgument and names the one field that is wrong, and what is
// valid.
func (d Deployment) normalize() (Deployment, error) {
	bad := func(field, format string, args ...any) (Deployment, error) {
		return d, fieldError(d.Name, field, fmt.Sprintf(format, args...))
	}
	if !nameRE.MatchString(d.Name) {
		return bad("Name", "%q is not a valid name: use letters, digits, '-', '_' and '.', starting with a letter or digit", d.Name)
	}
	if d.Replica == nil {
		return bad("Replica", "nil; use serve.Actor or serve.Process")
	}
	if len(d.Resources) > 0 {
		for _, f := range []struct {
			name string
			set  bool
		}{{"Accelerator", d.Accelerator != ""}, {"Topology", d.Topology != ""}, {"ChipsPerVM", d.ChipsPerVM != 0}, {"ChipsPerReplica", d.ChipsPerReplica != 0}} {
			if f.set {
				return bad(f.name, "is set with Resources: a replica holds either resources of a node (Resources) or TPU chips (Accelerator, Topology); unset one")
			}
		}
		for _, k := range slices.Sorted(maps.Keys(d.Resources)) {
			v := d.Resources[k]
			switch {
			case k == ray.TPU:
				return bad("Resources", "asks for %v TPU: TPU chips are held with Accelerator, Topology and ChipsPerReplica, not Resources", v)
			case v < 0 || math.IsNaN(v) || math.IsInf(v, 0):
				return bad("Resources", "%s %v is not a count: use 0 or more", k, v)
			}
		}
	} else {
		if d.Accelerator == "" {
			return bad("Accelerator", "empty; name the TPU generation of a replica's slice, such as \"v6e\" (or give Resources for a replica without TPU)")
		}
		if d.Topology == "" {
			return bad("Topology", "empty; name the topology of a replica's slice, such as \"2x4\"")
		}
		if _, err := tpu.ParseGeneration(d.Accelerator); err != nil {
			return bad("Accelerator", "%v", err)
		}
		if d.ChipsPerVM < 0 {
			return bad("ChipsPerVM", "%d is negative: use 0 (the shape's default) or the chips of one VM", d.ChipsPerVM)
		}
		if _, err := d.shape(); err != nil {
			field := "Topology"
			if errors.Is(err, tpu.ErrInvalidChipsPerHost) {
				field = "ChipsPerVM"
			}
			return bad(field, "%v", err)
		}
	}
	for _, f := range []struct {
		name string
		v    int64
		zero string
	}{
		{"MinReplicas", int64(d.MinReplicas), "1"},
		{"MaxReplicas", int64(d.MaxReplicas), "MinReplicas"},
		{"MaxConcurrentRequests", int64(d.MaxConcurrentRequests), "8"},
		{"MaxRetries", int64(d.MaxRetries), "3"},
		{"ChipsPerReplica", int64(d.ChipsPerReplica), "whole slices"},
		{"RequestTimeout", int64(d.RequestTimeout), "60s"},
		{"DrainTimeout", int64(d.DrainTimeout), "RequestTimeout"},
	} {
		if f.v < 0 {
			v := strconv.FormatInt(f.v, 10)
			if strings.HasSuffix(f.name, "Timeout") {
				v = time.Duration(f.v).String()
			}
			return bad(f.name, "%s is negative: use 0 (meaning %s) or more", v, f.zero)
		}
	}
	if d.MinReplicas == 0 {
		d.MinReplicas = 1
	}
	if d.MaxReplicas == 0 {
		d.MaxReplicas = d.MinReplicas
	}
	if d.MaxReplicas < d.MinReplicas {
		return bad("MaxReplicas", "%d is below MinReplicas %d: use 0 (meaning MinReplicas) or at least %d", d.MaxReplicas, d.MinReplicas, d.MinReplicas)
	}
	if d.MaxConcurrentRequests == 0 {
		d.MaxConcurrentRequests = 8
	}
	if d.MaxQueuedRequests == 0 {
		d.MaxQueuedRequests = 4 * d.MaxReplicas
	} else if d.MaxQueuedRequests < 0 {
		d.MaxQueuedRequests = 0
	}
	if d.MaxRetries == 0 {
		d.MaxRetries = 3
	}
	if d.RequestTimeout == 0 {
		d.RequestTimeout = time.Minute
	}
	if d.DrainTimeout == 0 {
		d.DrainTimeout = d.RequestTimeout
	}
	if a := d.Autoscaling; a != nil {
		c := *a
		switch {
		case c.TargetOngoingRequests < 0:
			return bad("Autoscaling.TargetOngoingRequests", "%v is negative: use 0 (half of MaxConcurrentRequests) or more", c.TargetOngoingRequests)
		case c.UpscaleDelay < 0:
			return bad("Autoscaling.UpscaleDelay", "%v is negative: use 0 or more", c.UpscaleDelay)
		case c.DownscaleDelay < 0:
			return bad("Autoscaling.DownscaleDelay", "%v is negative: use 0 (60s) or more", c.DownscaleDelay)
		case c.Interval < 0:
			return bad("Autoscaling.Interval", "%v is negative: use 0 (1s) or more", c.Interval)
		}
		if c.TargetOngoingRequests == 0 {
			c.TargetOngoingRequests = max(1, float64(d.MaxConcurrentRequests)/2)
		}
		if c.DownscaleDelay == 0 {
			c.DownscaleDelay = time.Minute
		}
		if c.Interval == 0 {
			c.Interval = time.Second
		}
		d.Autoscaling = &c
	}
	if u := d.RollingUpdate; u != nil {
		switch {
		case u.MaxSurge < 0:
			return bad("RollingUpdate.MaxSurge", "%d is negative: use 0 (no replica above MinReplicas) or more", u.MaxSurge)
		case u.MaxUnavailable < 0:
			return bad("RollingUpdate.MaxUnavailable", "%d is negative: use 0 (every replica of MinReplicas ready throughout) or more", u.MaxUnavailable)
		case u.MaxSurge == 0 && u.MaxUnavailable == 0:
			return bad("RollingUpdate", "MaxSurge and MaxUnavailable are both 0, so no replica could be replaced: set MaxSurge 1 (one replica at a time beside the old ones) or MaxUnavailable 1 (one at a time in place of an old one), or leave RollingUpdate nil (the whole new version beside the old)")
		}
		c := *u
		d.RollingUpdate = &c
	} else {
		d.RollingUpdate = &RollingUpdate{MaxSurge: d.MinReplicas}
	}
	h := HealthCheck{}
	if d.Health != nil {
		h = *d.Health
	}
	switch {
	case h.Period < 0:
		return bad("Health.Period", "%v is negative: use 0 (5s) or more", h.Period)
	case h.Timeout < 0:
		return bad("Health.Timeout", "%v is negative: use 0 (the Period) or more", h.Timeout)
	case h.FailureThreshold < 0:
		return bad("Health.FailureThreshold", "%d is negative: use 0 (3) or more", h.FailureThreshold)
	}
	if h.Period == 0 {
		h.Period = 5 * time.Second
	}
	if h.Timeout == 0 {
		h.Timeout = h.Period
	}
	if h.FailureThreshold == 0 {
		h.FailureThreshold = 3
	}
	d.Health = &h
	if err := d.Replica.validate(); err != nil {
		return bad("Replica", "%v", err)
	}
	hasModels := false
	if mr, ok := d.Replica.(interface{ modelsName() string }); ok && mr.modelsName() != "" {
		hasModels = true
	}
	_, isActor := d.Replica.(interface{ endpointSet() endpointSet })
	if d.Multiplex == nil && hasModels {
		d.Multiplex = &Multiplex{}
	}
	if m := d.Multiplex; m != nil {
		c := *m
		switch {
		case isActor && !hasModels:
			return bad("Multiplex", "is set, but the actor has no serve.Multiplexed endpoint to load models with: pass serve.Multiplexed(models) to serve.Actor (models from serve.NewModels), or leave Multiplex nil")
		case c.MaxModelsPerReplica < 0:
			return bad("Multiplex.MaxModelsPerReplica", "%d is negative: use 0 (meaning 3) or more", c.MaxModelsPerReplica)
		case c.LoadTimeout < 0:
			return bad("Multiplex.LoadTimeout", "%v is negative: use 0 (meaning RequestTimeout) or more", c.LoadTimeout)
		}
		if c.MaxModelsPerReplica == 0 {
			c.MaxModelsPerReplica = 3
		}
		if c.LoadTimeout == 0 {
			c.LoadTimeout = d.RequestTimeout
		}
		d.Multiplex = &c
	}
	seen := map[string]bool{}
	for i, id := range d.Models {
		if id == "" {
			return bad("Models", "[%d] is empty: name each model the deployment serves", i)
		}
		if err := checkModelID(id); err != nil {
			return bad("Models", "[%d]: %v", i, err)
		}
		if seen[id] {
			return bad("Models", "lists %q twice", id)
		}
		seen[id] = true
	}
	d.Models = slices.Clone(d.Models)
	if d.ChipsPerReplica != 0 && len(d.Resources) == 0 {
		shape, _ := d.shape() // checked above
		switch {
		case shape.Hosts() != 1:
			return bad("ChipsPerReplica", "%d needs a single-host topology, but %s has %d hosts; hold whole slices (ChipsPerReplica 0), or pick a topology of one host", d.ChipsPerReplica, shape, shape.Hosts())
		case !slices.Contains(chipsPerReplicaOptions(shape), d.ChipsPerReplica):
			valid := chipsPerReplicaOptions(shape)
			return bad("ChipsPerReplica", "%d: a %s host has %d chips, and a process holds 1, 2, 4 or 8 of them (as in Ray); use %s, or 0 for the whole host",
				d.ChipsPerReplica, shape, shape.ChipsPerHost, orList(valid))
		}
	}
	return d, nil
}

// fieldError is the error of a Deployment whose field is wrong: code
// InvalidArgument, and a message naming the field ("Deployment.<field>").
func fieldError(name, field, msg string) error {
	return &backend.Error{Code: backend.InvalidArgument, Op: fmt.Sprintf("serve: deployment %q", name), Err: &FieldError{Field: field, Msg: msg}}
}

// FieldError is the cause of a Deploy error for a wrong field of the
// Deployment (errors.As finds it); the error's code is InvalidArgument.
type FieldError struct {
	// Field is the field's name, such as "MinReplicas" or "Health.Period".
	Field string
	// Msg says what is wrong with it and what is valid.
	Msg string
}

func (e *FieldError) Error() string { return "Deployment." + e.Field + ": " + e.Msg }

// chipsPerReplicaOptions are the chip counts a replica may hold on a host
// of shape: Ray's 1, 2, 4 and 8, fewer than the host has.
func chipsPerReplicaOptions(shape tpu.SliceShape) []int {
	var out []int
	for _, k := range []int{1, 2, 4, 8} {
		if k < shape.ChipsPerHost {
			out = append(out, k)
		}
	}
	return out
}

// orList renders ns as "1", "1 or 2", "1, 2 or 4".
func orList(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// shape is the slice shape of Accelerator, Topology and ChipsPerVM.
func (d *Deployment) shape() (tpu.SliceShape, error) {
	return tpu.NewSliceShape(tpu.Generation(d.Accelerator), d.Topology, d.ChipsPerVM)
}

// sliceSpec is the reservation of one replica.
func (d *Deployment) sliceSpec(replica string) ray.SliceSpec {
	return ray.SliceSpec{Topology: d.Topology, AcceleratorVersion: d.Accelerator, ChipsPerVM: d.ChipsPerVM, Name: replica}
}
