package kubernetes

import (
	"context"
	"os"

	"github.com/google/wire"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/cluster"
)

// Backend is goray's cluster runtime on a Kubernetes cluster: the shared
// runtime (scheduler, object store, actors, placement groups, TPU slice
// index) with this package's Source as its node source and Runner as its
// runner. Pass it to ray.NewCluster; it implements backend.Backend,
// backend.Snapshotter, backend.FaultInjector and backend.SliceReserver.
//
// Those methods are the embedded [cluster.Runtime]'s (Start, SubmitTask,
// ..., KillNode, PreemptSlice, ReserveSlices, Slices, Close: see its
// documentation); the methods below are this backend's own.
type Backend struct {
	*cluster.Runtime
	source *Source
	runner *Runner
	id     ClusterID
	// driverHost is Config.DriverHost.
	driverHost string
	// chipMetricsPort is Config.ChipMetricsPort with its default
	// (chipmetrics.go).
	chipMetricsPort int
}

// New builds the backend for cfg by hand: the client (kubeconfig or
// in-cluster), a fresh ClusterID, the slice Leases, the Source and the
// Runner. Nothing talks to the cluster until ray.NewCluster starts it.
func New(ctx context.Context, cfg Config) (*Backend, error) {
	if cfg.Worker.Image == "" && os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		client, err := NewClientset(cfg)
		if err != nil {
			return nil, err
		}
		if cfg.Worker.Image, err = OwnImage(ctx, client, cfg); err != nil {
			return nil, err
		}
		cfg.Client = client
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	client, err := NewClientset(cfg)
	if err != nil {
		return nil, err
	}
	cfg.Client = client
	id := NewClusterID()
	leases, err := NewLeases(client, cfg)
	if err != nil {
		return nil, err
	}
	src, err := NewSource(client, cfg, id, leases)
	if err != nil {
		return nil, err
	}
	r, err := NewRunner(client, cfg, id)
	if err != nil {
		return nil, err
	}
	return NewFromParts(cfg, id, src, r)
}

// NewFromParts assembles the backend from its parts (the Wire provider
// set's last step; New does the same by hand).
func NewFromParts(cfg Config, id ClusterID, src *Source, r *Runner) (*Backend, error) {
	if !cfg.KeepKlog {
		RouteKlog(cfg.withDefaults().Logger)
	}
	r.gone, r.leaseLost = src.WorkerGone, src.PodLost
	// Capacity pods are worker pods in waiting, which the runner adopts
	// (ProvisionConfig.Placeholders).
	src.workerPod, r.adoptions, r.dropAdoptions = r.pt.pod, src.adoptionsOf, src.dropAdoptions
	rt, err := cluster.New(src, r, cluster.Options{Logger: cfg.withDefaults().Logger, HostIdle: cfg.Worker.HostIdle, WaitWarning: cfg.WaitWarning})
	if err != nil {
		return nil, backend.Wrap(backend.CodeOf(err), "create Kubernetes backend", err)
	}
	return &Backend{Runtime: rt, source: src, runner: r, id: id, driverHost: cfg.DriverHost, chipMetricsPort: chipMetricsPort(cfg.ChipMetricsPort)}, nil
}

// ClusterID is the value of LabelCluster on every object of this handle:
//
//	kubectl get pods,services,secrets -l goray.dev/cluster=<id>
func (b *Backend) ClusterID() ClusterID { return b.id }

// Client returns the Kubernetes client the backend uses.
func (b *Backend) Client() kubernetes.Interface { return b.source.client }

// BackendSet is Set plus the last step, NewFromParts: the whole backend
// from a Config, bound to the backend interface raywire.Set consumes. An
// injector is wire.Build(kubernetes.BackendSet, raywire.Set); see
// examples/wire in this module.
var BackendSet = wire.NewSet(Set, NewFromParts, wire.Bind(new(backend.Backend), new(*Backend)))

// DriverHost implements backend.DriverAddresser: Config.DriverHost, else
// the driver pod's IP ($POD_IP). A driver in a pod without $POD_IP, or
// outside the cluster, gets a FailedPrecondition error that says what to
// set: worker pods cannot reach its loopback.
func (b *Backend) DriverHost(ctx context.Context) (string, error) {
	const op = "find the driver's address for its workers"
	if b.driverHost != "" {
		return b.driverHost, nil
	}
	if ip := os.Getenv("POD_IP"); ip != "" {
		return ip, nil
	}
	if os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		return "", backend.Errorf(backend.FailedPrecondition, op, "the driver runs in a pod without $POD_IP: pass the pod's IP with the downward API (env POD_IP, valueFrom.fieldRef.fieldPath status.podIP), or set kubernetes.Config.DriverHost")
	}
	return "", backend.Errorf(backend.FailedPrecondition, op, "the driver runs outside the cluster, where worker pods cannot reach it: run the driver in the cluster (docs/kubernetes.md), or set kubernetes.Config.DriverHost (or train's RunConfig.Rendezvous) to an address of this machine that pods can reach")
}

var _ backend.DriverAddresser = (*Backend)(nil)

// OwnImage returns the image of the first container of the pod the driver
// runs in: $POD_NAME (else $HOSTNAME, which kubelet sets to the pod's
// name) in cfg's namespace. New uses it when Worker.Image is empty in a
// pod, so the workers run the driver's own program.
func OwnImage(ctx context.Context, client kubernetes.Interface, cfg Config) (string, error) {
	const op = "find the driver pod's own image"
	name := os.Getenv("POD_NAME")
	if name == "" {
		name = os.Getenv("HOSTNAME")
	}
	ns := cfg.withDefaults().Namespace
	if name == "" {
		return "", backend.Errorf(backend.InvalidArgument, op, "Worker.Image is empty and neither $POD_NAME nor $HOSTNAME names the driver's pod: set Worker.Image, or pass POD_NAME (env valueFrom.fieldRef.fieldPath metadata.name)")
	}
	pod, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", backend.Errorf(apiCode(err), op, "Worker.Image is empty, so the workers would run the driver pod's image, but pod %s/%s could not be read: %v; set Worker.Image (or POD_NAME, if the pod's hostname is not its name)", ns, name, err)
	}
	if len(pod.Spec.Containers) == 0 || pod.Spec.Containers[0].Image == "" {
		return "", backend.Errorf(backend.InvalidArgument, op, "Worker.Image is empty and pod %s/%s has no container image to use: set Worker.Image", ns, name)
	}
	return pod.Spec.Containers[0].Image, nil
}

var _ backend.OutputReader = (*Backend)(nil)

// RecentOutput returns the last lines the code of tasks and actors wrote
// in node's worker pod (backend.OutputReader; the dashboard shows them),
// oldest first. Node "" holds the lines that name no work.
func (b *Backend) RecentOutput(node string) []string {
	return b.runner.output.Strings(node)
}
