package train

import (
	"context"
	"fmt"
	"maps"
	"net"
	"strconv"
	"strings"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/ray"
)

// ProfilerPortEnv is the variable that carries a rank's profiler port
// when RunConfig.ProfilerPort is set: ProfilerPort + rank, so that ranks
// sharing a machine (the simulator, a v7x host's two processes) never
// collide. A JAX program starts its profiler server on it:
//
//	jax.profiler.start_server(int(os.environ["GORAY_PROFILER_PORT"]))
//
// and the dashboard lists each rank's host:port (Report.Profilers), the
// address TensorBoard's "Capture profile" asks for.
const ProfilerPortEnv = "GORAY_PROFILER_PORT"

// checkProfilerPort checks RunConfig.ProfilerPort for a run of workers
// ranks: every rank's port must be a valid one.
func checkProfilerPort(port, workers int) error {
	if port == 0 {
		return nil
	}
	if port < 0 || port+workers-1 > 65535 {
		return fmt.Errorf("train: RunConfig.ProfilerPort %d: ranks 0 to %d listen on ProfilerPort + rank, which must lie in 1-65535; use 0 for none", port, workers-1)
	}
	return nil
}

// profilerEnv adds rank's profiler port to env (a copy) when port is set.
func profilerEnv(env map[string]string, port, rank int) map[string]string {
	if port == 0 {
		return env
	}
	env = maps.Clone(env)
	if env == nil {
		env = map[string]string{}
	}
	env[ProfilerPortEnv] = strconv.Itoa(port + rank)
	return env
}

// profilerAddrs returns each rank's profiler address, host:port. The host
// is the one the rank's slice env names it by (TPU_WORKER_HOSTNAMES at
// its TPU_WORKER_ID); on a backend whose workers run beside the driver
// (no backend.DriverAddresser: the simulator) it is 127.0.0.1.
func profilerAddrs(ctx context.Context, c *ray.Cluster, spg *ray.SlicePlacementGroup, workers, port int) []string {
	if port == 0 {
		return nil
	}
	_, remote := ray.As[backend.DriverAddresser](c)
	out := make([]string, workers)
	for i := range workers {
		host := "127.0.0.1"
		if remote {
			env := spg.WorkerEnv(i)
			names := strings.Split(env["TPU_WORKER_HOSTNAMES"], ",")
			if id, err := strconv.Atoi(env["TPU_WORKER_ID"]); err == nil && id >= 0 && id < len(names) && names[id] != "" {
				host = names[id]
			}
		}
		out[i] = net.JoinHostPort(host, strconv.Itoa(port+i))
	}
	return out
}
