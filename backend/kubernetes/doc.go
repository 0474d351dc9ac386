// Package kubernetes runs goray on a Kubernetes cluster, with GKE TPU node
// pools as TPU slices and the user's own program, in worker mode, as the
// worker pods.
//
// The backend is goray's shared cluster runtime (backend/cluster: the
// scheduler, object store, actors, placement groups and TPU slice index,
// the same code as backend/local) with Kubernetes as its node source
// ([Source]) and pods as its runner ([Runner]); it is not a second
// scheduler. It lives in a module of its own
// (github.com/goray-dev/goray/backend/kubernetes), so that programs that
// only use the simulator never build client-go.
//
//	b, err := kubernetes.New(ctx, kubernetes.Config{
//		Worker: kubernetes.WorkerConfig{Image: "us-docker.pkg.dev/p/r/app:v1"},
//	})
//	c, err := ray.NewCluster(ctx, b, nil) // the rest of the program as on the simulator
//
// The image is the program itself (its main calls ray.Main first); ko
// builds one without Docker. docs/kubernetes.md is the guide to running on
// GKE: a v6e 4x4 node pool, the image, RBAC (deploy/rbac.yaml), the driver
// in the cluster.
//
// # Configuration
//
// [Config] names the cluster (a kubeconfig file and context, or the
// in-cluster config, or a ready client), the namespace, the worker image,
// command, service account and resources, the CPU pool, pod template
// overrides (tolerations, priority class, labels, annotations, node
// selector) and the Lease times. [Config.Validate] reports every wrong
// field at once, naming what is valid. [New] builds the backend by hand;
// [Set] is the same construction as a github.com/google/wire provider set,
// and [BackendSet] the whole backend: an injector is
// wire.Build(kubernetes.BackendSet, raywire.Set) (examples/wire in this
// module is one).
//
// # Discovery
//
// One shared Node informer (a watch; never a list per request) feeds the
// runtime. Nodes labelled cloud.google.com/gke-tpu-accelerator and
// cloud.google.com/gke-nodepool are TPU hosts; one node pool is one slice,
// reported once it is whole: as many hosts as its topology
// (cloud.google.com/gke-tpu-topology) needs, every one Ready, schedulable
// and offering the google.com/tpu chips its machine type has. Worker IDs
// follow node names in natural order (or the ray.io/tpu-worker-id label),
// the same in every driver. A host deleted, NotReady or cordoned is lost
// (its work fails with Unavailable and is retried; the runtime hands the
// slice out again only when it is whole); when it is back it is reported
// again; a node of the pool's shape with a new name (GKE recreating a
// failed VM) replaces a host whose node is gone, under that host's worker
// ID and runtime name, so the slice is whole again. Other nodes are CPU
// nodes ([CPUPool]). Custom runtime resources
// come from the node annotation goray.dev/resources ([AnnotationResources]),
// and a node may carry a runtime name of its own ([LabelName]).
//
// # Slices shared between drivers
//
// [Leases] claims slices for one driver with coordination.k8s.io Leases:
// one per slice, created only if absent, renewed, taken over by another
// driver only after it expired (an update carrying the resourceVersion
// read), all or nothing across the slices of a multislice reservation, and
// deleted on release. A slice held elsewhere fails the claim with a
// *cluster.HeldError (ResourceExhausted) and the runtime tries other slices
// or waits. A driver that crashed leaves Leases that expire. A claim of
// part of a slice (a sub-slice: the runtime claims a sub-slice
// reservation as its parent slice with the sub-slice's hosts) holds the
// slice's Lease in shared mode: the driver's sub-slices of the slice
// share it, other drivers are kept off the whole slice.
//
// # Worker pods
//
// A reservation, of whole slices or a sub-slice, starts one pod per host
// ([Runner.Reserved]), pinned to its node by node affinity on
// metadata.name (so kube-scheduler still accounts for the chips),
// requesting google.com/tpu equal to the host's chips
// (requests = limits), with the host's env from the runtime
// (TPU_WORKER_ID, TPU_NAME, the topology and bounds variables,
// MEGASCALE_* for multislice), whose TPU_WORKER_HOSTNAMES,
// TPU_PROCESS_ADDRESSES and MEGASCALE_COORDINATOR_ADDRESS name the pods
// in a headless Service ([Runner.HostNames]): the runtime derives the env
// once with those names, so a task's ray.Runtime env, the reservation's
// WorkerEnv and the pod's process env agree. Work that needs no reserved slice runs in one CPU pod
// per node (on a TPU host, one that tolerates GKE's TPU taint and requests no chips), started when work is first placed there and deleted once idle
// for CPUPool.IdleTimeout while more than CPUPool.Min run, so the pool
// follows the demand between Min and Max. Every object carries the label
// goray.dev/cluster=<id> ([Backend.ClusterID]) and is owned by the
// handle's Secret, so one handle's objects can be listed and
// garbage-collected; Close deletes its pods with one DeleteCollection on
// that label. A pod that is deleted, evicted or fails, or whose
// connection drops, loses its node.
//
// # Security
//
// The driver dials each worker through package worker over mutual TLS
// with a per-handle token. The backend generates a CA per cluster handle
// (ECDSA P-256, valid for a year, its key only in the driver's memory)
// and issues a worker certificate and a driver certificate, valid for
// Worker.CertValidity and renewed at half of it (a new Secret generation
// that new pods read); the Secret it creates holds the token, the CA certificate
// and the worker certificate and key, which the pods read through
// secretKeyRefs (never literals in the pod spec). Each side verifies that
// the other's certificate was signed by the CA for its role: a worker
// refuses a plaintext driver or one of another CA, a driver refuses a
// worker of another handle. docs/kubernetes.md (Security) has the details
// and deploy/rbac.yaml the driver's least privilege.
//
// # Tests
//
// Unit tests use the client-go fake clientset (with reactors for conflicts,
// API errors and resourceVersion checks, and a fake kubelet that serves
// real workers on loopback). The end-to-end tests (build tag e2e, run by
// scripts/e2e.sh) use internal/kubeharness, a real apiserver, etcd and
// kube-scheduler, and run as the RBAC identity of deploy/rbac.yaml: the
// whole backend/backendtest conformance suite with real worker pods,
// drivers competing for slices, node and pod loss, and examples/slice
// with only its constructor changed.
package kubernetes
