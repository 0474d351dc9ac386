package backend

import "time"

// RecentFailures is how many recent failures a backend keeps, and so the
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

// TaskSummary counts the tasks of one name that wait and that run, as
// [State.Tasks] lists them.
type TaskSummary struct {
	// Name is the call's display name, else the task name.
	Name string
	// Queued counts tasks waiting for resources; Running counts tasks
	// running now.
	Queued, Running int
}
