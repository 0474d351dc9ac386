package local_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/goray-dev/goray/ray"
)

// whoAmIFunc returns its input with the task name and the CPUs its
// runtime info gives it, as the worker process sees them.
func whoAmIFunc(ctx context.Context, s string) (string, error) {
	rc, ok := ray.Runtime(ctx)
	if !ok {
		return "", errors.New("no runtime info")
	}
	return fmt.Sprintf("%s %s cpu=%g", rc.TaskName(), s, rc.Resources()["CPU"]), nil
}

var (
	whoAmI = ray.NewTask("proctest.who_am_i", whoAmIFunc)
	// whoAmITwo is whoAmI under another name, called with two CPUs:
	// another class, another runtime info.
	whoAmITwo = ray.NewTask("proctest.who_am_i_two", whoAmIFunc)
	// waitForCancel returns when its context ends.
	waitForCancel = ray.NewTask("proctest.wait_for_cancel", func(ctx context.Context, _ int) (int, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	})
)

// TestTaskRecordsReusedKeepTasksApart: through a worker process, where
// the runtime reuses finished tasks' records, rounds of tasks of two kinds
// (other names, other resources) mixed with tasks cancelled while they
// run each get their own input, runtime info and result, and the
// cancelled ones their cancellation, round after round.
func TestTaskRecordsReusedKeepTasksApart(t *testing.T) {
	c, _ := processCluster(t, nil)
	ctx := testCtx(t)
	for round := range 8 {
		var refs []ray.ObjectRef[string]
		var want []string
		var held []ray.ObjectRef[int]
		for i := range 150 {
			in := fmt.Sprintf("r%d-%d", round, i)
			switch i % 5 {
			case 0:
				held = append(held, waitForCancel.Remote(ctx, c, i))
			case 1:
				refs = append(refs, whoAmITwo.Remote(ctx, c, in, ray.Resources{"CPU": 2}))
				want = append(want, "proctest.who_am_i_two "+in+" cpu=2")
			default:
				refs = append(refs, whoAmI.Remote(ctx, c, in))
				want = append(want, "proctest.who_am_i "+in+" cpu=1")
			}
			if i%7 == 3 && len(held) > 0 { // cancel an earlier one while the rest run
				if err := held[0].Cancel(ctx); err != nil {
					t.Fatalf("round %d: cancel: %v", round, err)
				}
				if _, err := held[0].Get(ctx); ray.CodeOf(err) != ray.Canceled {
					t.Fatalf("round %d: a cancelled task's Get = %v, want a cancellation", round, err)
				}
				held = held[1:]
			}
		}
		for _, h := range held {
			if err := h.Cancel(ctx); err != nil {
				t.Fatalf("round %d: cancel: %v", round, err)
			}
		}
		got, err := ray.GetAll(ctx, refs)
		if err != nil {
			t.Fatalf("round %d: GetAll: %v", round, err)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("round %d: result %d = %q, want %q", round, i, got[i], want[i])
			}
		}
		for _, h := range held {
			if _, err := h.Get(ctx); ray.CodeOf(err) != ray.Canceled {
				t.Fatalf("round %d: a cancelled task's Get = %v, want a cancellation", round, err)
			}
		}
	}
}
