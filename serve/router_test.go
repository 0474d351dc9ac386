package serve

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"
)

// testDeployment is a deployment with replicas of the given ongoing
// requests, all ready, and no cluster behind them.
func testDeployment(limit, queue int, ongoing ...int) *deployment {
	s := &Server{changed: make(chan struct{}), deployments: map[string]*deployment{}}
	s.metrics = newMetrics(s)
	d := &deployment{s: s, spec: Deployment{Name: "t", MaxConcurrentRequests: limit, MaxQueuedRequests: queue}, window: newWindow(time.Second)}
	s.deployments["t"] = d
	for i, n := range ongoing {
		d.replicas = append(d.replicas, &replica{d: d, id: string(rune('a' + i)), state: stateReady, ongoing: n, firstReq: true})
	}
	return d
}

func TestPickPowerOfTwoChoices(t *testing.T) {
	tests := []struct {
		name    string
		limit   int
		ongoing []int
		exclude []int
		// never lists replicas that must never be picked; nilPick says no
		// replica may be picked at all.
		never   []int
		nilPick bool
	}{
		{"one free", 4, []int{2}, nil, nil, false},
		{"two: the less loaded always wins", 4, []int{3, 0}, nil, []int{0}, false},
		{"full replicas are skipped", 2, []int{2, 1, 2}, nil, []int{0, 2}, false},
		{"the most loaded of three never wins", 8, []int{5, 1, 3}, nil, []int{0}, false},
		{"excluded replicas are skipped", 4, []int{0, 3}, []int{0}, []int{0}, false},
		{"all full", 1, []int{1, 1}, nil, nil, true},
		{"none ready", 1, nil, nil, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			d := testDeployment(tt.limit, 0, tt.ongoing...)
			var exclude []*replica
			for _, i := range tt.exclude {
				exclude = append(exclude, d.replicas[i])
			}
			for range 200 {
				r := d.pickLocked(exclude)
				if tt.nilPick {
					is.Equal(r, nil)
					continue
				}
				is.True(r != nil)
				for _, i := range tt.never {
					is.True(r != d.replicas[i]) // never picked
				}
			}
		})
	}
}

func TestPickSpreadsEvenLoad(t *testing.T) {
	is := is.New(t)
	d := testDeployment(1000, 0, 0, 0, 0, 0)
	for range 400 {
		d.takeLocked(d.pickLocked(nil))
	}
	for _, r := range d.replicas {
		// Power of two choices keeps the spread within a few requests.
		is.True(r.ongoing >= 95 && r.ongoing <= 105)
	}
}

func TestQueueHandsOffInOrderAndOverflows(t *testing.T) {
	is := is.New(t)
	d := testDeployment(1, 2, 1)
	ctx := context.Background()
	got := make(chan int, 2)
	for i := range 2 {
		go func() {
			r, err := d.acquire(ctx, nil)
			if err == nil && r == d.replicas[0] {
				got <- i
			}
		}()
		// Wait until the request is queued before sending the next.
		is.NoErr(d.s.WaitStatus(ctx, func(st Status) bool { return st.Deployments[0].Queued == i+1 }))
	}
	_, err := d.acquire(ctx, nil)
	is.True(errors.Is(err, ErrOverloaded)) // the queue is full
	d.release(d.replicas[0])
	is.Equal(<-got, 0) // first in, first served
	d.release(d.replicas[0])
	is.Equal(<-got, 1)

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = d.acquire(cctx, nil)
	is.True(errors.Is(err, context.Canceled)) // a cancelled request leaves the queue
	d.mu.Lock()
	is.Equal(len(d.waiters), 0)
	d.mu.Unlock()
}

func TestScalerDelays(t *testing.T) {
	t0 := time.Unix(0, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	type step struct {
		ms, ongoing, want int
	}
	tests := []struct {
		name  string
		cfg   Autoscaling
		min   int
		max   int
		steps []step
	}{
		{"up at once without delay", Autoscaling{TargetOngoingRequests: 2}, 1, 4, []step{
			{0, 5, 3}, {1, 8, 4}, {2, 100, 4},
		}},
		{"up after the delay, reset by a dip", Autoscaling{TargetOngoingRequests: 2, UpscaleDelay: 100 * time.Millisecond}, 1, 4, []step{
			{0, 6, 1}, {50, 6, 1}, {60, 1, 1}, {120, 6, 1}, {219, 6, 1}, {220, 6, 3},
		}},
		{"down after the delay, never below min", Autoscaling{TargetOngoingRequests: 2, DownscaleDelay: 100 * time.Millisecond}, 2, 4, []step{
			{0, 8, 4}, {10, 0, 4}, {109, 0, 4}, {110, 0, 2}, {300, 0, 2},
		}},
		{"a rise cancels a pending scale-down", Autoscaling{TargetOngoingRequests: 1, DownscaleDelay: 100 * time.Millisecond}, 1, 4, []step{
			{0, 3, 3}, {10, 1, 3}, {60, 3, 3}, {120, 1, 3}, {219, 1, 3}, {220, 1, 1},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			s := &scaler{cfg: tt.cfg, min: tt.min, max: tt.max}
			cur := tt.min
			for _, st := range tt.steps {
				cur = s.decide(at(st.ms), st.ongoing, cur)
				is.Equal(cur, st.want) // target at this step
			}
		})
	}
}

func TestWindowSummary(t *testing.T) {
	is := is.New(t)
	w := newWindow(10 * time.Second)
	w.started = time.Unix(0, 0)
	now := time.Unix(20, 0)
	for i := range 100 {
		w.add(now.Add(-time.Duration(i)*time.Millisecond), time.Duration(i+1)*time.Millisecond)
	}
	w.add(now.Add(-time.Minute), time.Hour) // too old to count
	rps, p50, p99 := w.summary(now)
	is.Equal(rps, 10.0) // 100 requests in the 10s span
	is.Equal(p50, 51*time.Millisecond)
	is.Equal(p99, 100*time.Millisecond)
}

func TestQueuePassesRetryThatExcludesTheFreeReplica(t *testing.T) {
	is := is.New(t)
	d := testDeployment(1, 4, 0)
	ctx, cancel := context.WithCancel(context.Background())
	retried := make(chan error, 1)
	go func() {
		_, err := d.acquire(ctx, []*replica{d.replicas[0]}) // its replica failed it before
		retried <- err
	}()
	is.NoErr(d.s.WaitStatus(context.Background(), func(st Status) bool { return st.Deployments[0].Queued == 1 }))
	r, err := d.acquire(context.Background(), nil)
	is.NoErr(err)
	is.Equal(r, d.replicas[0]) // served at once, not queued behind the retry
	cancel()
	is.True(errors.Is(<-retried, context.Canceled))
}

// The status JSON names its durations' unit: seconds, in p50Seconds,
// p99Seconds and lastScaleUpSeconds; it reads back the same.
func TestStatusJSONUnits(t *testing.T) {
	is := is.New(t)
	st := DeploymentStatus{Name: "llm", P50: 51 * time.Millisecond, P99: 1500 * time.Millisecond, LastScaleUp: 2 * time.Second}
	b, err := json.Marshal(st)
	is.NoErr(err)
	s := string(b)
	t.Log(s)
	is.True(strings.Contains(s, `"p50Seconds":0.051`))
	is.True(strings.Contains(s, `"p99Seconds":1.5`))
	is.True(strings.Contains(s, `"lastScaleUpSeconds":2`))
	is.True(!strings.Contains(s, `"p50":`)) // no unitless nanoseconds
	var back DeploymentStatus
	is.NoErr(json.Unmarshal(b, &back))
	is.Equal(back.P50, st.P50)
	is.Equal(back.P99, st.P99)
	is.Equal(back.Name, "llm")
}
