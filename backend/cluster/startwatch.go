package cluster

// The watch an executor that starts tasks elsewhere (backend.TaskStarter,
// such as a worker process's client) keeps on each task in flight, to
// cancel it in the worker when the task's context is cancelled:
// AfterFuncID is AfterFunc without the allocation of a stop function per
// task.

// AfterFuncID is like AfterFunc: f runs, on a goroutine of its own, once
// the context is cancelled (at once if it is already). Instead of a stop
// function it returns the watch's number, for StopAfterFunc, when the
// context had no other watch; otherwise (another watch is registered) it
// returns 0 and a stop function, as AfterFunc does. Either way nothing
// but f is allocated per call in the usual case.
func (c *taskCtx) AfterFuncID(f func()) (id uint64, stop func() bool) {
	l := &c.lazyCancel
	l.mu.Lock()
	if l.cause == notCancelled && l.one == nil && l.afters == nil {
		l.oneID++
		l.one = f
		id = l.oneID
		l.mu.Unlock()
		return id, nil
	}
	l.mu.Unlock()
	return 0, l.afterFunc(f, nil)
}

// StopAfterFunc ends the watch numbered id (AfterFuncID) and reports
// whether it stopped it before it ran; false when it ran, was stopped, or
// a later watch took its place.
func (c *taskCtx) StopAfterFunc(id uint64) bool { return c.lazyCancel.stopOne(id) }

// stopOne ends the single watch numbered id, if it is still the one
// registered, and reports whether it did.
func (l *lazyCancel) stopOne(id uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.one != nil && l.oneID == id {
		l.one = nil
		return true
	}
	return false
}
