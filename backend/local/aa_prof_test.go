//go:build unix

package local_test

import (
	"os"
	"runtime/pprof"
	"time"

	"github.com/goray-dev/goray/worker"
)

func init() {
	p := os.Getenv("ZZ_WORKER_PROF")
	if p == "" || !worker.Launched() {
		return
	}
	f, err := os.Create(p)
	if err != nil {
		return
	}
	pprof.StartCPUProfile(f)
	go func() { time.Sleep(4 * time.Second); pprof.StopCPUProfile(); f.Close() }()
}
