// Package kubeharness runs a real Kubernetes control plane on loopback for
// tests: etcd, kube-apiserver, kube-scheduler and kube-controller-manager
// built from the Go module proxy, simulated GKE TPU node pools, and a node
// agent that runs the pods bound to those nodes as local processes; with
// Options.Network NetworkIsolated each pod gets a network namespace of its
// own and cluster DNS from CoreDNS.
//
// It is test-only: import it from _test files that carry `//go:build e2e`.
// Every file of the package except this one has that constraint, so the
// plain `go test ./...` never compiles k8s.io packages. Build the binaries
// with scripts/k8s-build.sh and run the tests with `make e2e`
// (docs/harness.md).
//
//	func TestSomething(t *testing.T) {
//		cp := kubeharness.Start(t, nil) // skips unless GORAY_E2E=1
//		ctx := t.Context()
//		_, err := cp.AddTPUNodePool(ctx, kubeharness.NodePool{
//			Name: "slice-a", Generation: "v6e", Topology: "4x4"}) // 4 nodes × 4 chips
//		...
//		pod := kubeharness.NewTestProgramPod("worker-0", "exit", "0")
//		_, err = cp.Client().CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
//		p, err := cp.WaitForPod(ctx, "default", "worker-0", func(p *corev1.Pod) bool {
//			return p != nil && p.Status.Phase == corev1.PodSucceeded })
//	}
//
// # Control plane
//
// Start picks free loopback ports, writes a random bearer token
// (system:masters) and a service-account key into a run folder under
// os.TempDir, lets kube-apiserver generate its own self-signed serving
// certificate (--cert-dir), waits for etcd /health, the apiserver's
// /readyz and default namespace, and the scheduler's /readyz, then starts
// the node agent; a start that loses a picked port to another process is
// retried on new ports (three attempts). Config and Client give tests an
// admin client. kube-controller-manager runs the garbage collector, Job,
// TTL-after-finished, namespace, ServiceAccount, EndpointSlice, ReplicaSet
// and Deployment controllers, but not the node lifecycle controller (nodes
// send no heartbeats). The TaintNodesByCondition admission plugin is off
// (nothing would lift the not-ready taint), and so is ServiceAccount
// admission (the agent mounts no token volumes).
//
// # Nodes
//
// AddTPUNodePool creates one Ready node per TPU host of a slice with the
// GKE labels cloud.google.com/gke-tpu-accelerator (tpu-v4-podslice,
// tpu-v5-lite-podslice, tpu-v5p-slice, tpu-v6e-slice, tpu7x),
// cloud.google.com/gke-tpu-topology, cloud.google.com/gke-nodepool,
// cloud.google.com/gke-accelerator-count and node.kubernetes.io/instance-type,
// and google.com/tpu, cpu, memory and pods capacity. AddCPUNodes creates
// plain nodes. Agent nodes (the default) run their pods as processes; kwok
// nodes (NodePool.Kwok) are simulated by kwok, which starts on first use and
// makes their pods Running without running anything, for scale tests. Nodes
// are created Ready and stay Ready: the controller manager runs without the
// node lifecycle controller, so nothing watches heartbeats, and neither the
// agent nor kwok sends any.
//
// # Node agent
//
// One agent serves every agent node of a control plane; it is the
// harness's kubelet. A pod bound to an agent node gets its own IP: with
// NetworkLoopback (the default) a loopback 127.B.x.y, unique within the
// control plane (Linux accepts binds on any 127/8 address); with
// NetworkIsolated a 10.B.x.y in a network namespace of its own (see
// Network). Each container runs as a process in its own process group:
//
//   - argv: the container's command + args when command is set, run on the
//     host as is (looked up on PATH); otherwise the image's binary from the
//     image table + args. $(VAR) references are expanded.
//   - env: PATH, HOME (the pod folder), HOSTNAME, KUBERNETES_SERVICE_HOST/PORT,
//     POD_NAME, POD_NAMESPACE, POD_UID, POD_IP, NODE_NAME, HOST_IP, then the
//     container's envFrom and env (value, fieldRef, resourceFieldRef,
//     configMapKeyRef, secretKeyRef), which override them.
//   - logs: stdout and stderr in <run>/pods/<ns>_<pod>_<uid>/<container>.log,
//     read with ControlPlane.PodLogs; the previous run of a restarted
//     container is kept as <container>.previous.log.
//   - status: phase, podIP(s), hostIP(s), startTime, conditions and
//     container states (waiting, running, terminated with exit code or
//     128+signal) are written with UpdateStatus. restartPolicy is honoured
//     with a 1 s to 10 s backoff (CrashLoopBackOff); init containers run in
//     order, sidecars (init containers with restartPolicy Always) alongside.
//   - deletion: a graceful delete sends SIGTERM, waits the grace period,
//     SIGKILLs, writes the final status and removes the pod; a deleted pod
//     object or a deleted node kills the processes at once; a deleted node's
//     pods are marked Failed (DisruptionTarget, DeletionByPodGC) and removed,
//     as kube-controller-manager's pod garbage collector would.
//
// Not supported: volumes (the container sees the host file system), probes
// (Ready means running), resource limits (nothing is enforced),
// kube-proxy (ClusterIP Services lead nowhere: talk to pod IPs or, with
// NetworkIsolated, headless-Service names), exec/attach/port-forward and
// `kubectl logs` (there is no kubelet API), and, with NetworkLoopback,
// network isolation (a process can bind any address; bind to $POD_IP).
//
// Image table. An image maps to a local binary; Options.Images entries
// override and extend the built-in table. Keys match exactly first, then
// without tag, digest and docker.io/(library/) prefix:
//
//	image                           binary
//	goray.dev/kubeharness/testprog  the test binary itself (ImageTestProgram;
//	                                see RunTestProgram for its commands)
//	busybox, alpine, debian, ubuntu "" = no entrypoint: command (or args[0])
//	                                runs from the host PATH
//	anything else                   not pulled: the container waits with
//	                                reason ErrImagePull, naming the table
//
// Why not virtual-kubelet. github.com/virtual-kubelet/virtual-kubelet
// v1.14.1 is on the module proxy and its k8s.io requirements (v0.37.1) would
// not downgrade ours, but it runs one node controller (and pod informer) per
// node, while the harness wants one agent for 64 or more nodes; it brings
// k8s.io/apiserver, k8s.io/kubelet and controller-runtime into the library's
// go.mod for a test-only feature; and what it adds (kubelet HTTPS API, node
// leases and status loops) is what the harness needs least, with nothing
// watching node leases. The agent here is a few hundred lines
// over one shared client-go pod informer.
//
// # Teardown
//
// Start registers the teardown with t.Cleanup, so it runs when the test
// passes, fails or panics: the agent kills the pods' process groups, then
// kwok, the scheduler, the apiserver and etcd get SIGTERM and, after 3 s,
// SIGKILL, each by its own PID (as -PGID of the group it leads), and the run
// folder is removed (kept with GORAY_K8S_KEEP=1). A SIGINT or SIGTERM to the
// test binary kills them at once and re-raises the signal. Every child has
// the parent-death signal SIGKILL, so a test binary that dies without
// cleanup (go test -timeout, a panic off the test goroutine, SIGKILL) takes
// its children along; the next Start removes run folders left by dead test
// binaries. Nothing else on the machine is signalled.
//
// # Environment
//
// The package builds only with -tags e2e. GORAY_E2E=1 runs the harness;
// without it Start skips at once, so `go test -tags e2e ./...` and
// `go vet -tags e2e ./...` need no binaries. With it, missing binaries
// fail the test. GORAY_K8S_BIN_DIR overrides the binary folder
// (<repo>/.cache/k8s/<versions>/bin). GORAY_K8S_KEEP=1 keeps run folders
// for debugging (Kubeconfig gives a kubeconfig for kubectl).
//
// # Concurrency
//
// A ControlPlane's methods are safe for concurrent use, and several control
// planes may run at once in one test binary (about 0.45 GiB and 4 s each).
package kubeharness
