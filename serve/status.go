package serve

import (
	"cmp"
	"encoding/json"
	"math"
	"slices"
	"sync"
	"time"
)

// Status is a point-in-time view of a server's deployments, served as
// JSON at GET /-/status. It is a copy: holding it holds nothing.
type Status struct {
	// ShuttingDown is set once Shutdown has begun.
	ShuttingDown bool               `json:"shuttingDown"`
	Deployments  []DeploymentStatus `json:"deployments"`
}

// Deployment returns the status of the deployment named name, if any.
func (s Status) Deployment(name string) (DeploymentStatus, bool) {
	for _, d := range s.Deployments {
		if d.Name == name {
			return d, true
		}
	}
	return DeploymentStatus{}, false
}

// DeploymentStatus describes one deployment. In JSON its durations are
// seconds, their keys saying so: p50Seconds, p99Seconds,
// lastScaleUpSeconds.
type DeploymentStatus struct {
	Name string `json:"name"`
	// Accelerator and Topology are each replica's slice.
	Accelerator string `json:"accelerator"`
	Topology    string `json:"topology"`
	// MinReplicas, MaxReplicas and Target bound and set the replica count;
	// Ready counts replicas taking traffic.
	MinReplicas int `json:"minReplicas"`
	MaxReplicas int `json:"maxReplicas"`
	Target      int `json:"target"`
	Ready       int `json:"ready"`
	// SlicesHeld counts the whole slices the deployment's replicas hold
	// now; ChipsHeld the chips replicas of ChipsPerReplica hold.
	SlicesHeld int             `json:"slicesHeld"`
	ChipsHeld  int             `json:"chipsHeld,omitempty"`
	Replicas   []ReplicaStatus `json:"replicas"`
	// Queued counts requests waiting in the router for a free replica.
	Queued int `json:"queued"`
	// RequestsPerSecond, P50 and P99 cover the requests finished in the
	// last 10 seconds.
	RequestsPerSecond float64       `json:"requestsPerSecond"`
	P50               time.Duration `json:"-"`
	P99               time.Duration `json:"-"`
	// ReplicaFailures counts replicas lost to dead hosts, dead actors or
	// failed health checks since the deployment started.
	ReplicaFailures int `json:"replicaFailures"`
	// LastScaleUp is the time from the last scale-up decision (or
	// replacement) to its replica taking its first request; the replicas
	// a deployment starts with are not timed.
	LastScaleUp time.Duration `json:"-"`
	// LastError is the last replica start failure, cleared when a replica
	// becomes ready.
	LastError string `json:"lastError,omitempty"`
}

// deploymentStatusJSON is DeploymentStatus in JSON: its durations in
// seconds.
type deploymentStatusJSON struct {
	deploymentStatusFields
	P50Seconds         float64 `json:"p50Seconds"`
	P99Seconds         float64 `json:"p99Seconds"`
	LastScaleUpSeconds float64 `json:"lastScaleUpSeconds"`
}

// deploymentStatusFields has DeploymentStatus's fields without its
// methods, so that encoding/json encodes them as they are.
type deploymentStatusFields DeploymentStatus

// MarshalJSON writes the status with its durations in seconds
// (p50Seconds, p99Seconds, lastScaleUpSeconds).
func (d DeploymentStatus) MarshalJSON() ([]byte, error) {
	return json.Marshal(deploymentStatusJSON{
		deploymentStatusFields: deploymentStatusFields(d),
		P50Seconds:             d.P50.Seconds(), P99Seconds: d.P99.Seconds(), LastScaleUpSeconds: d.LastScaleUp.Seconds(),
	})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (d *DeploymentStatus) UnmarshalJSON(b []byte) error {
	var j deploymentStatusJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*d = DeploymentStatus(j.deploymentStatusFields)
	sec := func(s float64) time.Duration { return time.Duration(math.Round(s * float64(time.Second))) }
	d.P50, d.P99, d.LastScaleUp = sec(j.P50Seconds), sec(j.P99Seconds), sec(j.LastScaleUpSeconds)
	return nil
}

// ReplicaStatus describes one replica.
type ReplicaStatus struct {
	ID string `json:"id"`
	// State is STARTING, READY, DRAINING or STOPPING.
	State string `json:"state"`
	// Slices and Hosts are the replica's reservation (empty while it
	// waits for a slice).
	Slices []string `json:"slices,omitempty"`
	Hosts  []string `json:"hosts,omitempty"`
	// Ongoing is its queue length: requests routed to it and not done.
	Ongoing int   `json:"ongoing"`
	Served  int64 `json:"served"`
	// Reason says why a stopping or draining replica is going away.
	Reason string `json:"reason,omitempty"`
	// Models are the models loaded or loading on the replica, least
	// recently used first (a multiplexed deployment's; nil otherwise).
	Models []string `json:"models,omitempty"`
}

// statusLocked builds d's status. d.mu must be held.
func (d *deployment) statusLocked(now time.Time) DeploymentStatus {
	st := DeploymentStatus{
		Name: d.spec.Name, Accelerator: d.spec.Accelerator, Topology: d.spec.Topology,
		MinReplicas: d.spec.MinReplicas, MaxReplicas: d.spec.MaxReplicas, Target: d.target,
		Queued: len(d.waiters), ReplicaFailures: d.failures, LastScaleUp: d.lastScaleUp,
	}
	if d.lastErr != nil {
		st.LastError = d.lastErr.Error()
	}
	for _, r := range d.replicas {
		if r.state == stateReady {
			st.Ready++
		}
		if r.spg != nil && !r.released {
			if _, chips := r.spg.(*chipPlacement); chips {
				st.ChipsHeld += d.spec.ChipsPerReplica
			} else {
				st.SlicesHeld += len(r.slices)
			}
		}
		st.Replicas = append(st.Replicas, ReplicaStatus{
			ID: r.id, State: r.state.String(), Slices: slices.Clone(r.slices), Hosts: slices.Clone(r.hosts),
			Ongoing: r.ongoing, Served: r.served, Reason: r.reason,
		})
		if d.multiplexed() {
			byUse := slices.Clone(r.models)
			slices.SortFunc(byUse, func(a, b *modelSlot) int { return cmp.Compare(a.used, b.used) })
			ids := make([]string, len(byUse))
			for i, s := range byUse {
				ids[i] = s.id
			}
			st.Replicas[len(st.Replicas)-1].Models = ids
		}
	}
	st.RequestsPerSecond, st.P50, st.P99 = d.window.summary(now)
	return st
}

// window keeps the latencies of recent requests for the status API.
type window struct {
	mu      sync.Mutex
	span    time.Duration
	started time.Time
	at      []time.Time
	lat     []time.Duration
	next    int
}

const windowSize = 4096

func newWindow(span time.Duration) *window {
	return &window{span: span, started: time.Now()}
}

func (w *window) add(at time.Time, d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.at) < windowSize {
		w.at, w.lat = append(w.at, at), append(w.lat, d)
		return
	}
	w.at[w.next], w.lat[w.next] = at, d
	w.next = (w.next + 1) % windowSize
}

// summary returns the rate and the p50 and p99 latencies of the requests
// that finished within the span before now.
func (w *window) summary(now time.Time) (rps float64, p50, p99 time.Duration) {
	w.mu.Lock()
	var lat []time.Duration
	oldest := now
	for i, at := range w.at {
		if now.Sub(at) <= w.span {
			lat = append(lat, w.lat[i])
			if at.Before(oldest) {
				oldest = at
			}
		}
	}
	span := min(w.span, now.Sub(w.started))
	full := len(w.at) == windowSize
	w.mu.Unlock()
	if len(lat) == 0 {
		return 0, 0, 0
	}
	if full {
		// The ring overflowed within the span: measure over what it holds.
		span = now.Sub(oldest)
	}
	if span > 0 {
		rps = float64(len(lat)) / span.Seconds()
	}
	slices.Sort(lat)
	q := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	return rps, q(0.50), q(0.99)
}
