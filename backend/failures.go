package backend

import "time"

// RecentFailures is how many failures a [FailureRing] keeps, and so the
// most that [State.Failures] lists.
const RecentFailures = 100

// TaskFailure is one failed attempt of a task or actor call, as
// [State.Failures] lists it.
type TaskFailure struct {
	// Task is the task's name (the call's display name, else the task
	// name), or "Class.Method" for an actor call.
	Task string
	// Attempt counts from 0; a retried task fails once per attempt.
	Attempt int
	// Node is where the attempt ran, or "" if it never ran on one.
	Node string
	// Code and Message are the error's code and text.
	Code    Code
	Message string
	Time    time.Time
}

// NewTaskFailure describes a failed attempt of task on node, now.
func NewTaskFailure(task string, attempt int, node string, err error) TaskFailure {
	return TaskFailure{Task: task, Attempt: attempt, Node: node, Code: CodeOf(err), Message: err.Error(), Time: time.Now()}
}

// FailureRing keeps the last [RecentFailures] failures in constant memory:
// a new failure overwrites the oldest. The zero value is empty and ready
// to use; it allocates on its first failure. A FailureRing is not safe for
// concurrent use: backends add and list under their own lock.
type FailureRing struct {
	buf  []TaskFailure
	next int // where the next failure goes once buf is full
}

// Add records f, dropping the oldest failure if the ring is full.
func (r *FailureRing) Add(f TaskFailure) {
	if len(r.buf) < RecentFailures {
		if r.buf == nil {
			r.buf = make([]TaskFailure, 0, RecentFailures)
		}
		r.buf = append(r.buf, f)
		return
	}
	r.buf[r.next] = f
	r.next = (r.next + 1) % RecentFailures
}

// List returns a copy of the failures, oldest first, or nil if there are
// none.
func (r *FailureRing) List() []TaskFailure {
	if len(r.buf) == 0 {
		return nil
	}
	out := make([]TaskFailure, 0, len(r.buf))
	out = append(out, r.buf[r.next:]...)
	return append(out, r.buf[:r.next]...)
}

// TaskSummary counts the tasks of one name that wait and that run, as
// [State.Tasks] lists them.
type TaskSummary struct {
	// Name is the call's display name, else the task name.
	Name string
	// Queued counts tasks waiting for resources; Running counts tasks
	// running now.
	Queued, Running int
}
