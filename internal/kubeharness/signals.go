//go:build e2e

package kubeharness

import (
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// live holds the control planes that are not torn down yet, for the
// SIGINT/SIGTERM handler. Child processes sit in their own process groups,
// so a Ctrl-C at the terminal reaches only the test binary; the handler
// kills the children (by PID), removes the run folders, then re-raises the
// signal so the binary ends as it would have without the handler.
var live struct {
	sync.Mutex
	cps     map[*ControlPlane]struct{}
	handler sync.Once
}

func registerLive(cp *ControlPlane) {
	live.handler.Do(func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
		go func() {
			sig := <-ch
			fmt.Fprintf(os.Stderr, "kubeharness: %v: killing the control planes' processes and removing their run folders\n", sig)
			killLive()
			signal.Reset(syscall.SIGINT, syscall.SIGTERM)
			_ = syscall.Kill(os.Getpid(), sig.(syscall.Signal))
		}()
	})
	live.Lock()
	defer live.Unlock()
	if live.cps == nil {
		live.cps = make(map[*ControlPlane]struct{})
	}
	live.cps[cp] = struct{}{}
}

func unregisterLive(cp *ControlPlane) {
	live.Lock()
	defer live.Unlock()
	delete(live.cps, cp)
}

func killLive() {
	live.Lock()
	cps := make([]*ControlPlane, 0, len(live.cps))
	for cp := range live.cps {
		cps = append(cps, cp)
	}
	live.Unlock()
	var wg sync.WaitGroup
	for _, cp := range cps {
		wg.Go(cp.kill)
	}
	wg.Wait()
}
