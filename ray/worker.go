package ray

import (
	"os"
	"slices"
	"strings"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/worker"
)

// Main turns the program into a worker when a backend launched it as one,
// and otherwise returns at once. Call it first in main, before anything
// else runs:
//
//	func main() {
//		ray.Main()
//		// the driver program: open a cluster, submit work...
//	}
//
// Go cannot ship closures, so a backend that runs work in other processes
// (backend/local with ProcessOptions, backend/kubernetes's worker pods)
// starts the program's own executable as a worker: the worker registers the same
// tasks and actor classes at init, then Main serves them to the driver
// that launched it and never returns: the process exits when its driver
// goes away. A driver and a worker built from different code refuse each
// other with a FailedPrecondition error naming the differing names and
// types.
//
// Outside worker mode Main reads one environment variable and returns. In
// tests that start worker processes, call it first in TestMain (the test
// binary is the executable the workers run).
//
// Values are decoded in the worker with the codec the driver names: [JSON]
// is built in; pass any other codec a cluster may use.
func Main(codecs ...Codec) {
	if !worker.Launched() {
		return
	}
	os.Exit(worker.ServeLaunched(workerRegistry{codecs: codecs}))
}

// workerRegistry is the process's registry as a worker serves it.
type workerRegistry struct{ codecs []Codec }

func (r workerRegistry) Entries() []worker.Entry {
	return registryEntries("this worker process started serving")
}

func (r workerRegistry) Executor(name string) (backend.Executor, error) {
	const op = "run worker main"
	if name == "" {
		return nil, backend.Errorf(backend.FailedPrecondition, op, "the driver does not encode values (ray.Options.DisableCodec), which cannot cross to a worker process; use a codec")
	}
	have := []string{JSON.Name()}
	if name == JSON.Name() {
		return NewExecutor(JSON), nil
	}
	for _, c := range r.codecs {
		if c != nil && c.Name() == name {
			return NewExecutor(c), nil
		}
		if c != nil {
			have = append(have, c.Name())
		}
	}
	return nil, backend.Errorf(backend.FailedPrecondition, op, "the driver encodes with codec %q, which this worker does not have (it has %s): pass the codec to ray.Main", name, strings.Join(have, ", "))
}

// WorkerManifest describes the executor's codec and the process's
// registry, for the handshake with worker processes.
func (x executor) WorkerManifest() worker.Manifest {
	m := worker.Manifest{Entries: registryEntries("worker processes started")}
	if x.codec != nil {
		m.Codec = x.codec.Name()
	}
	return m
}

// registryEntries lists every registered task, actor class and method with
// its Go types, sorted, for worker processes: it seals the registry (why
// says what started them).
func registryEntries(why string) []worker.Entry {
	registry.Lock()
	defer registry.Unlock()
	sealRegistry(why)
	var out []worker.Entry
	for name, t := range registry.tasks {
		sig := "func(" + worker.TypeString(t.in) + ") " + worker.TypeString(t.out)
		if t.stream != nil {
			sig = "func(" + worker.TypeString(t.in) + ") stream of " + worker.TypeString(t.out)
		}
		out = append(out, worker.Entry{Kind: worker.KindTask, Name: name, Signature: sig})
	}
	for name, c := range registry.classes {
		actor := worker.TypeString(c.actor)
		out = append(out, worker.Entry{Kind: worker.KindActor, Name: name,
			Signature: "func(" + worker.TypeString(c.in) + ") " + actor})
		for mname, m := range c.methods {
			out = append(out, worker.Entry{Kind: worker.KindMethod, Name: name + "." + mname,
				Signature: "func(" + actor + ", " + worker.TypeString(m.in) + ") " + worker.TypeString(m.out)})
		}
	}
	slices.SortFunc(out, func(a, b worker.Entry) int {
		if c := strings.Compare(a.Kind, b.Kind); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}
