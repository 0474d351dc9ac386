package cluster

import (
	"sync"
	"sync/atomic"
)

// pool runs work on reusable goroutines. Reusing a goroutine keeps the
// stack it grew, so a task does not pay for stack growth again; a
// goroutine that finds enough idle peers exits. Every goroutine is counted
// in wg and exits once quit closes.
//
// An idle goroutine waits on the idle channel alone (a plain receive costs
// less than a select with quit, which was a sixth of a synchronous task's
// CPU): when quit closes, a drainer hands each remaining goroutine a nil
// runner, which makes it exit.
type pool struct {
	idle     chan runner
	nIdle    atomic.Int32
	live     atomic.Int32 // pool goroutines running
	maxIdle  int32
	wg       *sync.WaitGroup
	quitting atomic.Bool
	gone     chan struct{} // closed when quitting and the last goroutine exits
	goneOnce sync.Once
	// hold, set by tests only, takes a runner instead of running it when
	// it returns true.
	hold func(runner) bool
}

func newPool(wg *sync.WaitGroup, quit <-chan struct{}, maxIdle int) *pool {
	p := &pool{idle: make(chan runner), maxIdle: int32(maxIdle), wg: wg, gone: make(chan struct{})}
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-quit
		p.quitting.Store(true)
		p.drain()
	}()
	return p
}

// drain makes every pool goroutine exit: the idle ones take a nil runner,
// the running ones find quitting set (or take a nil runner) when done.
func (p *pool) drain() {
	for p.live.Load() > 0 {
		select {
		case p.idle <- nil:
		case <-p.gone:
			return
		}
	}
}

// runner is work for the pool. A task run is its own runner, which saves
// allocating a closure per task.
type runner interface{ run() }

// funcRunner adapts a function.
type funcRunner func()

func (f funcRunner) run() { f() }

// run runs f on an idle goroutine, or a new one.
func (p *pool) run(f runner) {
	if p.hold != nil && p.hold(f) {
		return
	}
	select {
	case p.idle <- f:
		return
	default:
	}
	p.wg.Add(1)
	p.live.Add(1)
	go p.loop(f)
}

func (p *pool) loop(f runner) {
	defer p.wg.Done()
	defer p.exit()
	for {
		f.run()
		f = nil
		if p.quitting.Load() {
			return
		}
		if p.nIdle.Add(1) > p.maxIdle {
			p.nIdle.Add(-1)
			return
		}
		f = <-p.idle
		p.nIdle.Add(-1)
		if f == nil {
			return // quit
		}
	}
}

// exit counts a goroutine out, and tells drain when it was the last.
func (p *pool) exit() {
	if p.live.Add(-1) == 0 && p.quitting.Load() {
		p.goneOnce.Do(func() { close(p.gone) })
	}
}
