package cluster

import (
	"cmp"
	"slices"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/internal/admission"
)

// recordFailure adds a failed attempt of running task t to the ring of
// recent failures that Snapshot reports. Only failures pay for it: the
// success path never calls it. b.mu must be held and t must still be on
// its node.
func (rt *Runtime) recordFailure(t *task, err error) {
	node := ""
	if t.node != nil {
		node = t.node.name
	}
	rt.failures.Add(admission.NewTaskFailure(taskName(t), t.attempt, node, err))
}

// taskName is the name a task is shown by: its call's display name, else
// its task name.
func taskName(t *task) string {
	if t.spec.DisplayName != "" {
		return t.spec.DisplayName
	}
	return t.spec.Name
}

// taskSummaries counts the tasks queued for resources (in the scheduling
// classes) and running (on the nodes) per name, by name. It costs one pass
// over the queued and running tasks, at snapshot time only. b.mu must be
// held.
func (rt *Runtime) taskSummaries() []backend.TaskSummary {
	counts := map[string]*backend.TaskSummary{}
	get := func(t *task) *backend.TaskSummary {
		name := taskName(t)
		s := counts[name]
		if s == nil {
			s = &backend.TaskSummary{Name: name}
			counts[name] = s
		}
		return s
	}
	for _, c := range rt.classes {
		for _, t := range c.queue[c.head:] {
			if t != nil && t.actorOf() == nil && t.state == stateQueued {
				get(t).Queued++
			}
		}
	}
	for _, n := range rt.nodes {
		for _, t := range n.running.ts {
			get(t).Running++
		}
	}
	out := make([]backend.TaskSummary, 0, len(counts))
	for _, s := range counts {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b backend.TaskSummary) int { return cmp.Compare(a.Name, b.Name) })
	return out
}
