package cluster

import "slices"

// taskSet is the set of tasks running on a node or in a bundle. Adding and
// removing cost no hashing: each task remembers its index in the set it is
// in (a task runs on one node and in at most one bundle at a time), and
// removal swaps the last task into the hole.
type taskSet struct {
	ts       []*task
	inBundle bool // the set is a bundle's: indices live in task.bundleIdx
}

func (s *taskSet) idx(t *task) *int32 {
	if s.inBundle {
		return &t.bundleIdx
	}
	return &t.nodeIdx
}

func (s *taskSet) add(t *task) {
	*s.idx(t) = int32(len(s.ts))
	s.ts = append(s.ts, t)
}

// remove, len and snapshot take a nil set as empty.
func (s *taskSet) remove(t *task) {
	if s == nil {
		return
	}
	i := int(*s.idx(t))
	if i < 0 || i >= len(s.ts) || s.ts[i] != t {
		return
	}
	last := len(s.ts) - 1
	if i != last {
		s.ts[i] = s.ts[last]
		*s.idx(s.ts[i]) = int32(i)
	}
	s.ts[last] = nil
	s.ts = s.ts[:last]
	*s.idx(t) = -1
}

func (s *taskSet) len() int {
	if s == nil {
		return 0
	}
	return len(s.ts)
}

// snapshot returns the tasks in a new slice, for loops that remove them.
func (s *taskSet) snapshot() []*task {
	if s == nil {
		return nil
	}
	return slices.Clone(s.ts)
}
