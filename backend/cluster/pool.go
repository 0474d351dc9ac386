package cluster

import (
	"sync"
	"sync/atomic"
)

// pool runs work on reusable goroutines. Reusing a goroutine keeps the
// stack it grew, so a task does not pay for stack growth again; a
// goroutine that finds enough idle peers exits. Every goroutine is counted
// in wg and exits when quit closes.
type pool struct {
	idle    chan runner
	nIdle   atomic.Int32
	maxIdle int32
	wg      *sync.WaitGroup
	quit    <-chan struct{}
}

func newPool(wg *sync.WaitGroup, quit <-chan struct{}, maxIdle int) *pool {
	return &pool{idle: make(chan runner), maxIdle: int32(maxIdle), wg: wg, quit: quit}
}

// runner is work for the pool. A task run is its own runner, which saves
// allocating a closure per task.
type runner interface{ run() }

// funcRunner adapts a function.
type funcRunner func()

func (f funcRunner) run() { f() }

// run runs f on an idle goroutine, or a new one.
func (p *pool) run(f runner) {
	select {
	case p.idle <- f:
		return
	default:
	}
	p.wg.Add(1)
	go p.loop(f)
}

func (p *pool) loop(f runner) {
	defer p.wg.Done()
	for {
		f.run()
		f = nil
		if p.nIdle.Add(1) > p.maxIdle {
			p.nIdle.Add(-1)
			return
		}
		select {
		case f = <-p.idle:
			p.nIdle.Add(-1)
		case <-p.quit:
			p.nIdle.Add(-1)
			return
		}
	}
}
