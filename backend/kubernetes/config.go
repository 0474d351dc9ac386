package kubernetes

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/tpu"
	"github.com/goray-dev/goray/worker"
)

// Config configures the Kubernetes backend. Only Worker.Image is
// required; every other field has a default. Validate reports every
// field that is wrong at once.
type Config struct {
	// Kubeconfig is the path of a kubeconfig file. "" means the in-cluster
	// config when running in a pod, else $KUBECONFIG or ~/.kube/config
	// (client-go's default loading rules).
	Kubeconfig string
	// Context is the kubeconfig context; "" means its current context.
	Context string
	// REST, if set, is used instead of loading a kubeconfig (tests, or
	// programs that build their own).
	REST *rest.Config
	// Client, if set, is used instead of building one from REST or the
	// kubeconfig (the client-go fake clientset in unit tests).
	Client kubernetes.Interface

	// Namespace holds everything the backend creates (pods, the headless
	// Service, the token Secret, the slice Leases). "" means the pod's own
	// namespace in the cluster, else "default".
	Namespace string
	// Identity names this driver as the holder of slice Leases. "" means
	// the host name plus a random suffix, and in a pod
	// "<its ServiceAccount's user name>/<pod name>-<suffix>" (the pod name
	// from $POD_NAME, else $HOSTNAME: goray status finds the driver's pod
	// by it), the form the
	// admission policy deploy/lease-policy.yaml requires (outside the
	// cluster, set it that way yourself to run under that policy). Two
	// drivers must not share one.
	Identity string

	// Worker describes the worker pods.
	Worker WorkerConfig
	// CPUPool selects the nodes that run work needing no TPU.
	CPUPool CPUPool
	// Pod overrides parts of every worker pod's template.
	Pod PodOverrides
	// Lease times the slice Leases.
	Lease LeaseConfig
	// DriverHost is the host (IP or name) of the driver that worker pods
	// connect to, for servers the driver runs for its workers (train's
	// rendezvous). "" means the driver pod's IP from $POD_IP (set it with
	// the downward API, fieldRef status.podIP, as the Job in
	// docs/kubernetes.md does); a driver outside the cluster must set it
	// (or train's RunConfig.Rendezvous) to an address pods can reach.
	DriverHost string
	// Provision says whether the backend asks the cluster for TPU
	// capacity that does not exist yet (Autopilot, node auto-provisioning,
	// autoscaled node pools, Spot, flex-start). The default, ProvisionOff,
	// sees only existing nodes: a request for more slices than the cluster
	// has fails at once as Infeasible.
	Provision ProvisionConfig
	// Kueue, with a LocalQueue named, asks Kueue for the admission of
	// every slice reservation: its worker pods form one Kueue pod group in
	// that LocalQueue, admitted all at once against the ClusterQueue's
	// quota (see docs/kubernetes.md, "Shared clusters with Kueue"). Empty:
	// goray does not ask Kueue.
	Kueue KueueConfig
	// API limits the client's requests to the API server when the backend
	// builds the client (from a kubeconfig, the in-cluster config or
	// REST); a Client given in Client keeps its own limits.
	API APILimits

	// Logger receives the backend's logs; nil discards them. client-go's
	// own klog lines (such as its client-side throttling waits) go there
	// too, at Debug (see RouteKlog), unless KeepKlog is set.
	Logger *slog.Logger
	// KeepKlog leaves klog's lines on stderr instead of routing them to
	// Logger.
	KeepKlog bool
	// WaitWarning is how long a slice reservation, placement group, task
	// or actor may wait to start before a warning naming what waits and
	// why goes to Logger (then again with backoff); 0 means 10s, negative
	// turns the warnings off (cluster.Options.WaitWarning).
	WaitWarning time.Duration
	// ChipMetricsPort is the port of the TPU device plugin's metrics on
	// each TPU node, which Backend.ChipMetrics reads; 0 means GKE's,
	// tpu.DevicePluginMetricsPort (2112).
	ChipMetricsPort int
}

// WorkerConfig describes the worker pods: the user's own program, built
// into an image, whose main calls ray.Main first.
type WorkerConfig struct {
	// Image is the worker image, such as "us-docker.pkg.dev/p/r/app:v1"
	// (what `ko build` prints). Empty in a driver that runs in a pod means
	// the image of the driver pod's first container, read from the API
	// (the pod is $POD_NAME, else $HOSTNAME): the same program as the
	// driver, as workers must be. Outside a pod it is required.
	Image string
	// Command and Args replace the image's entrypoint and arguments; nil
	// keeps them.
	Command, Args []string
	// ServiceAccount runs the worker pods; "" means the namespace's
	// default. Workers need no Kubernetes API access.
	ServiceAccount string
	// Port is the port workers listen on, on their pod IP; 0 means 7077.
	Port int32
	// CPU and Memory are each worker pod's requests (and limits), in
	// Kubernetes quantity syntax; "" means none.
	CPU, Memory string
	// StartTimeout bounds a worker pod's start, from creation to a
	// connected worker; 0 means 5 minutes (image pulls can be slow).
	StartTimeout time.Duration
	// IdleTimeout is how long a worker waits for its driver before it
	// exits (so a crashed driver's pods end); 0 means 2 minutes.
	IdleTimeout time.Duration
	// LogLevel is the workers' log level (debug, info, warn, error, off);
	// "" means warn.
	LogLevel string
	// Stdout and Stderr receive what the code of tasks and actors writes
	// to os.Stdout and os.Stderr in the worker pods, line by line, prefixed
	// with where it comes from ("(task examples.square, node=..., pid=1)
	// ..."; see worker.PrefixOutput), as Ray prints its workers' output on
	// the driver. nil means the driver's os.Stdout and os.Stderr; io.Discard
	// turns a stream off. The pods' own logs keep every line as well.
	Stdout, Stderr io.Writer
	// CertValidity is how long the workers' and the driver's TLS
	// certificates are valid; 0 means 24 hours. The backend renews them at
	// half of it (a new Secret generation for new pods), from a CA that is
	// valid for a year, so a long-lived handle keeps starting pods.
	CertValidity time.Duration
	// HostIdle is how long a TPU host that this driver claimed for work
	// outside slice reservations (ray.Resources{TPU: 1}, serve's
	// ChipsPerReplica) keeps its pod, which holds the host's chips, and
	// its share of the slice's Lease once nothing runs there; 0 means 2s.
	HostIdle time.Duration
}

// CPUPool selects the Kubernetes nodes that count as CPU nodes of the
// cluster: nodes without the GKE TPU accelerator label that are Ready,
// schedulable and match NodeSelector. Work on a CPU node runs in one
// worker pod per node, started when work is first placed there.
type CPUPool struct {
	// NodeSelector restricts the CPU nodes by label; nil means every
	// non-TPU node.
	NodeSelector map[string]string
	// Min is the number of CPU nodes whose worker pods start with the
	// cluster instead of at first use.
	Min int
	// Max caps the CPU nodes the cluster uses; 0 means 16. Nodes past the
	// cap (in name order) are ignored until one in use goes away.
	Max int
	// IdleTimeout scales the pool down: a CPU worker pod that has had no
	// work (no task or call in flight, no actor living in it) for this
	// long is deleted, as long as more than Min CPU pods run; work placed
	// on its node later starts a new one. 0 means 1 minute.
	IdleTimeout time.Duration
}

// PodOverrides adds to every worker pod's template.
type PodOverrides struct {
	// Tolerations are added to the pods (GKE taints TPU nodes with
	// google.com/tpu=present:NoSchedule; pods requesting google.com/tpu
	// get that toleration from the ExtendedResourceToleration admission
	// plugin, and the backend adds it as well).
	Tolerations []corev1.Toleration
	// PriorityClassName is the pods' priority class.
	PriorityClassName string
	// Labels and Annotations are added to the pods. Keys under
	// goray.dev/ are the backend's own and rejected.
	Labels, Annotations map[string]string
	// NodeSelector is added to the CPU worker pods of CPU nodes, and
	// chooses which CPU nodes the backend uses. Pods on TPU nodes are
	// pinned to their node by name and tolerate GKE's google.com/tpu
	// taint: a reservation's, and the CPU pod of work the runtime placed
	// on a TPU host outside a reservation.
	NodeSelector map[string]string
}

// LeaseConfig times the coordination.k8s.io Leases that claim slices.
type LeaseConfig struct {
	// Duration is how long a claim survives its driver: another driver
	// may take a slice whose Lease was not renewed for this long. 0 means
	// 15s.
	Duration time.Duration
	// RenewEvery is the renewal period; 0 means Duration/3. It must be
	// less than Duration.
	RenewEvery time.Duration
}

// Defaults.
const (
	DefaultNamespace    = "default"
	DefaultWorkerPort   = 7077
	DefaultStartTimeout = 5 * time.Minute
	DefaultIdleTimeout  = 2 * time.Minute
	DefaultCPUPoolMax   = 16
	// DefaultCPUPoolIdleTimeout is CPUPool.IdleTimeout's default.
	DefaultCPUPoolIdleTimeout = time.Minute
	DefaultLeaseDuration      = 15 * time.Second
	// DefaultAPIQPS and DefaultAPIBurst are kube-scheduler's own client
	// limits (KubeSchedulerConfiguration clientConnection), in place of
	// client-go's 5 and 10: a v6e 16x16 reservation (64 hosts) creates 64
	// pods within the burst and deletes them on release, where client-go's
	// defaults would space those calls 200 ms apart (about 13 s each way).
	DefaultAPIQPS   = 50
	DefaultAPIBurst = 100
)

// APILimits are the client-side rate limits of the backend's requests to
// the API server (client-go's rest.Config QPS and Burst). The zero value
// means DefaultAPIQPS and DefaultAPIBurst.
type APILimits struct {
	// QPS is the sustained requests per second.
	QPS float32
	// Burst is how many requests may go at once above QPS.
	Burst int
}

// inClusterNamespaceFile is where a pod finds its own namespace, and
// inClusterTokenFile its ServiceAccount token.
const inClusterNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

var inClusterTokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"

// serviceAccountUser returns the user name of the pod's ServiceAccount
// (system:serviceaccount:<namespace>:<name>, the "sub" claim of its
// token; the API server verifies the token, this only reads it), or "".
func serviceAccountUser() string {
	b, err := os.ReadFile(inClusterTokenFile)
	if err != nil {
		return ""
	}
	parts := strings.Split(strings.TrimSpace(string(b)), ".")
	if len(parts) != 3 {
		return ""
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return ""
	}
	var claims struct {
		Sub string `json:"sub"`
	}
	if json.Unmarshal(payload, &claims) != nil || !strings.HasPrefix(claims.Sub, "system:serviceaccount:") {
		return ""
	}
	return claims.Sub
}

// withDefaults returns c with its defaults filled in.
func (c Config) withDefaults() Config {
	if c.Namespace == "" {
		c.Namespace = DefaultNamespace
		if b, err := os.ReadFile(inClusterNamespaceFile); err == nil && strings.TrimSpace(string(b)) != "" {
			c.Namespace = strings.TrimSpace(string(b))
		}
	}
	if c.Identity == "" {
		host, _ := os.Hostname()
		c.Identity = cmp.Or(host, "goray") + "-" + randomSuffix()
		if u := serviceAccountUser(); u != "" {
			// In a pod: <ServiceAccount user>/<pod name>-<suffix>, the
			// form deploy/lease-policy.yaml checks, with the pod's name
			// (goray status finds the driver's pod by it): $POD_NAME,
			// else $HOSTNAME, as for the driver's own image (ownImage).
			// The system's host name is the pod's spec.hostname when set
			// (an Indexed Job's pods), not its name.
			c.Identity = u + "/" + cmp.Or(os.Getenv("POD_NAME"), os.Getenv("HOSTNAME"), host, "goray") + "-" + randomSuffix()
		}
	}
	c.Worker.Port = cmp.Or(c.Worker.Port, DefaultWorkerPort)
	c.Worker.StartTimeout = cmp.Or(c.Worker.StartTimeout, DefaultStartTimeout)
	c.Worker.IdleTimeout = cmp.Or(c.Worker.IdleTimeout, DefaultIdleTimeout)
	c.Worker.CertValidity = cmp.Or(c.Worker.CertValidity, worker.DefaultCertValidity)
	c.CPUPool.Max = cmp.Or(c.CPUPool.Max, DefaultCPUPoolMax)
	c.CPUPool.IdleTimeout = cmp.Or(c.CPUPool.IdleTimeout, DefaultCPUPoolIdleTimeout)
	c.Lease.Duration = cmp.Or(c.Lease.Duration, DefaultLeaseDuration)
	c.Lease.RenewEvery = cmp.Or(c.Lease.RenewEvery, c.Lease.Duration/3)
	c.Provision.Image = cmp.Or(c.Provision.Image, DefaultCapacityImage)
	c.Provision.PriorityClass = cmp.Or(c.Provision.PriorityClass, DefaultCapacityPriorityClass)
	c.Provision.BindWait = cmp.Or(c.Provision.BindWait, DefaultBindWait)
	c.Provision.Class = cmp.Or(c.Provision.Class, DefaultProvisioningClass)
	c.API.QPS = cmp.Or(c.API.QPS, DefaultAPIQPS)
	c.API.Burst = cmp.Or(c.API.Burst, DefaultAPIBurst)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate checks c (with its defaults applied) and returns an
// InvalidArgument error naming every field that is wrong and what is
// valid, or nil.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	for _, m := range validation.IsDNS1123Label(c.Namespace) {
		bad("Namespace %q: %s", c.Namespace, m)
	}
	if strings.TrimSpace(c.Identity) == "" || len(c.Identity) > 512 {
		bad("Identity %q: want 1 to 512 non-blank characters", c.Identity)
	}
	if c.Worker.Image == "" {
		bad("Worker.Image is empty: name the image of your program (whose main calls ray.Main first), such as one built by ko; only a driver running in a pod may leave it empty (it then uses its own pod's image)")
	}
	if c.Worker.Port < 1 || c.Worker.Port > 65535 {
		bad("Worker.Port %d: want 1..65535 (0 means %d)", c.Worker.Port, DefaultWorkerPort)
	}
	if c.Worker.ServiceAccount != "" {
		for _, m := range validation.IsDNS1123Subdomain(c.Worker.ServiceAccount) {
			bad("Worker.ServiceAccount %q: %s", c.Worker.ServiceAccount, m)
		}
	}
	for name, q := range map[string]string{"Worker.CPU": c.Worker.CPU, "Worker.Memory": c.Worker.Memory} {
		if _, err := parseQuantity(q); err != nil {
			bad("%s %q: %v (want a Kubernetes quantity such as 500m, 2 or 4Gi)", name, q, err)
		}
	}
	errs = append(errs, c.Provision.validate()...)
	errs = append(errs, c.Kueue.validate(c.Provision)...)
	if c.Worker.StartTimeout < 0 || c.Worker.IdleTimeout < 0 || c.Worker.HostIdle < 0 {
		bad("Worker.StartTimeout %v, Worker.IdleTimeout %v and Worker.HostIdle %v: want >= 0 (0 means the default)", c.Worker.StartTimeout, c.Worker.IdleTimeout, c.Worker.HostIdle)
	}
	if c.ChipMetricsPort < 0 || c.ChipMetricsPort > 65535 {
		bad("ChipMetricsPort %d: want a port, 1-65535 (0 means %d, the GKE TPU device plugin's)", c.ChipMetricsPort, tpu.DevicePluginMetricsPort)
	}
	if c.Worker.CertValidity < time.Minute {
		bad("Worker.CertValidity %v: want at least 1m (0 means %v)", c.Worker.CertValidity, worker.DefaultCertValidity)
	}
	if !slices.Contains([]string{"", "debug", "info", "warn", "error", "off"}, c.Worker.LogLevel) {
		bad("Worker.LogLevel %q: want debug, info, warn, error or off", c.Worker.LogLevel)
	}
	if c.CPUPool.Min < 0 || c.CPUPool.Max < 0 || c.CPUPool.Min > c.CPUPool.Max {
		bad("CPUPool.Min %d, Max %d: want 0 <= Min <= Max (Max 0 means %d)", c.CPUPool.Min, c.CPUPool.Max, DefaultCPUPoolMax)
	}
	if c.API.QPS < 0 || c.API.Burst < 0 || (c.API.Burst < int(c.API.QPS) && c.API.QPS >= 1) {
		bad("API.QPS %v, API.Burst %d: want QPS >= 0 and Burst >= QPS (0 means %d and %d)", c.API.QPS, c.API.Burst, DefaultAPIQPS, DefaultAPIBurst)
	}
	if c.CPUPool.IdleTimeout < 0 {
		bad("CPUPool.IdleTimeout %v: want >= 0 (0 means %v)", c.CPUPool.IdleTimeout, DefaultCPUPoolIdleTimeout)
	}
	checkLabels := func(field string, m map[string]string, values bool) {
		for _, k := range sortedKeys(m) {
			for _, msg := range validation.IsQualifiedName(k) {
				bad("%s key %q: %s", field, k, msg)
			}
			if strings.HasPrefix(k, labelPrefix) {
				bad("%s key %q: keys under %s are the backend's own", field, k, labelPrefix)
			}
			if values {
				for _, msg := range validation.IsValidLabelValue(m[k]) {
					bad("%s[%q] = %q: %s", field, k, m[k], msg)
				}
			}
		}
	}
	checkLabels("Pod.Labels", c.Pod.Labels, true)
	checkLabels("Pod.Annotations", c.Pod.Annotations, false)
	checkLabels("Pod.NodeSelector", c.Pod.NodeSelector, true)
	checkLabels("CPUPool.NodeSelector", c.CPUPool.NodeSelector, true)
	if c.Pod.PriorityClassName != "" {
		for _, m := range validation.IsDNS1123Subdomain(c.Pod.PriorityClassName) {
			bad("Pod.PriorityClassName %q: %s", c.Pod.PriorityClassName, m)
		}
	}
	for i, t := range c.Pod.Tolerations {
		switch t.Operator {
		case "", corev1.TolerationOpEqual, corev1.TolerationOpExists:
		default:
			bad("Pod.Tolerations[%d].Operator %q: want Equal or Exists", i, t.Operator)
		}
	}
	if c.Lease.Duration < time.Second {
		bad("Lease.Duration %v: want at least 1s (0 means %v)", c.Lease.Duration, DefaultLeaseDuration)
	}
	if c.Lease.RenewEvery <= 0 || c.Lease.RenewEvery >= c.Lease.Duration {
		bad("Lease.RenewEvery %v: want more than 0 and less than Lease.Duration %v", c.Lease.RenewEvery, c.Lease.Duration)
	}
	if len(errs) == 0 {
		return nil
	}
	return backend.Errorf(backend.InvalidArgument, "configure Kubernetes backend", "%w", errors.Join(errs...))
}

// clientset returns the configured client: Client, else one built from
// REST, else from the kubeconfig or the in-cluster config.
func (c Config) clientset() (kubernetes.Interface, error) {
	const op = "configure Kubernetes backend"
	if c.Client != nil {
		return c.Client, nil
	}
	rc, err := c.restConfig()
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, backend.Errorf(backend.InvalidArgument, op, "build client for %s: %w", rc.Host, err)
	}
	return cs, nil
}

// restConfig returns the client config: REST (a copy), else the
// in-cluster config or the kubeconfig, with the API limits of c.
func (c Config) restConfig() (*rest.Config, error) {
	const op = "configure Kubernetes backend"
	var rc *rest.Config
	if c.REST != nil {
		rc = rest.CopyConfig(c.REST)
	} else {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		if c.Kubeconfig != "" {
			rules.ExplicitPath = c.Kubeconfig
		}
		var err error
		if c.Kubeconfig == "" && c.Context == "" {
			rc, err = rest.InClusterConfig()
		}
		if rc == nil {
			rc, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules,
				&clientcmd.ConfigOverrides{CurrentContext: c.Context}).ClientConfig()
		}
		if err != nil {
			return nil, backend.Errorf(backend.InvalidArgument, op, "load kubeconfig (Kubeconfig %q, Context %q; in-cluster config not available): %w", c.Kubeconfig, c.Context, err)
		}
	}
	c = c.withDefaults()
	if rc.RateLimiter == nil && rc.QPS == 0 && rc.Burst == 0 {
		rc.QPS, rc.Burst = c.API.QPS, c.API.Burst
	}
	return rc, nil
}

func sortedKeys[M ~map[string]V, V any](m M) []string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
