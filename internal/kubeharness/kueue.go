//go:build e2e

package kubeharness

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
)

// Kueue in the harness (ControlPlane.StartKueue): Kueue's own controller
// manager, built from the Go module proxy by scripts/kueue-build.sh, with
// its CRDs and webhooks, against the harness's API server.

// KueueVersion is the Kueue release scripts/kueue-build.sh builds
// (tools/kueue/go.mod pins it; TestKueueBuildScriptVersion keeps the three
// in step).
const KueueVersion = "v0.17.0"

// EnvKueueBinDir overrides the folder holding kueue, kueue-crds.yaml and
// kueue-webhooks.yaml (the same variable scripts/kueue-build.sh reads).
const EnvKueueBinDir = "GORAY_KUEUE_BIN_DIR"

const kueueBinDirKey = "kueue-" + KueueVersion

var kueueNames = []string{"kueue", "kueue-crds.yaml", "kueue-webhooks.yaml"}

// KueueBinDir is where scripts/kueue-build.sh builds Kueue: GORAY_KUEUE_BIN_DIR
// if set; else, when GORAY_K8S_BIN_DIR is set, the folder kueue-<version>/bin
// beside that one's key folder; else <repo>/.cache/k8s/kueue-<version>/bin.
func KueueBinDir() (string, error) {
	if d := os.Getenv(EnvKueueBinDir); d != "" {
		return filepath.Abs(d)
	}
	if d := os.Getenv(EnvBinDir); d != "" {
		d, err := filepath.Abs(d)
		if err != nil {
			return "", err
		}
		return filepath.Join(filepath.Dir(filepath.Dir(d)), kueueBinDirKey, "bin"), nil
	}
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, ".cache", "k8s", kueueBinDirKey, "bin"), nil
}

// KueueOptions configure StartKueue. A nil *KueueOptions means all
// defaults.
type KueueOptions struct {
	// BinDir holds kueue and its YAML files. Default: KueueBinDir().
	BinDir string
	// ManageJobsWithoutQueueName makes Kueue manage every pod and Job of
	// the namespaces it manages (all but kube-system and kueue-system),
	// with or without a kueue.x-k8s.io/queue-name label, as xpk's clusters
	// do: a pod without a queue is gated for ever.
	ManageJobsWithoutQueueName bool
}

// Kueue is Kueue's controller manager running against a control plane,
// started by ControlPlane.StartKueue and stopped with the control plane.
// The integrations on are plain pods ("pod") and Jobs ("batch/job").
type Kueue struct {
	cp   *ControlPlane
	dyn  dynamic.Interface
	proc *process
}

// The Kueue API the harness writes and reads, as unstructured objects (the
// harness does not depend on Kueue's Go module).
var (
	KueueClusterQueues  = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "clusterqueues"}
	KueueLocalQueues    = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "localqueues"}
	KueueResourceFlavor = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "resourceflavors"}
	KueueWorkloads      = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "workloads"}
	KueuePriorities     = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "workloadpriorityclasses"}
	KueueTopologies     = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "topologies"}
	KueueAdmissionCheck = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "admissionchecks"}
	KueueProvReqConfig  = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "provisioningrequestconfigs"}
	// ProvisioningRequests is the cluster autoscaler's ProvisioningRequest
	// resource (AutoscalerOptions.ProvisioningRequests installs it).
	ProvisioningRequests = provReqGVR
)

// kueueNamespace is where Kueue's manager would run in a cluster; its pod
// webhook leaves it alone.
const kueueNamespace = "kueue-system"

// StartKueue installs Kueue's CRDs and webhook configurations and starts
// its controller manager against the control plane, and returns once its
// webhooks answer. Kueue's webhooks are served on 127.0.0.1 with a
// certificate the harness makes: the webhook configurations name that URL
// and carry the harness's CA as their caBundle (Kueue's own certificate
// management is off). A Service in front of them would need endpoints on a
// loopback address, which the API server refuses in EndpointSlices.
//
// It fails with the command that builds Kueue when its files are missing.
func (cp *ControlPlane) StartKueue(ctx context.Context, opts *KueueOptions) (*Kueue, error) {
	var o KueueOptions
	if opts != nil {
		o = *opts
	}
	dir := o.BinDir
	if dir == "" {
		var err error
		if dir, err = KueueBinDir(); err != nil {
			return nil, err
		}
	}
	if m := missingBinaries(dir, kueueNames); len(m) > 0 {
		return nil, fmt.Errorf("kubeharness: %s missing in %s; build them with scripts/kueue-build.sh (or run `make e2e`)",
			strings.Join(m, ", "), dir)
	}
	t0 := time.Now()
	dyn, err := dynamic.NewForConfig(cp.Config())
	if err != nil {
		return nil, err
	}
	k := &Kueue{cp: cp, dyn: dyn}
	if err := k.installCRDs(ctx, filepath.Join(dir, "kueue-crds.yaml")); err != nil {
		return nil, err
	}
	tCRD := time.Since(t0)
	_, err = cp.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kueueNamespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("kubeharness: namespace %s: %w", kueueNamespace, err)
	}

	certDir := filepath.Join(cp.runDir, "kueue-certs")
	caPEM, err := writeWebhookCerts(certDir)
	if err != nil {
		return nil, fmt.Errorf("kubeharness: Kueue's webhook certificate: %w", err)
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	webhookPort, healthPort, visibilityPort := ports[0], ports[1], ports[2]
	cfgPath := filepath.Join(cp.runDir, "kueue.yaml")
	// The visibility API server (an aggregated API) is off: the harness's
	// API server has no front-proxy credentials to aggregate it with.
	// Finished workloads are deleted at once, as the pods they admitted are.
	cfg := fmt.Sprintf(`apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: %s
health: {healthProbeBindAddress: "127.0.0.1:%d"}
metrics: {bindAddress: "0"}
webhook: {host: 127.0.0.1, port: %d, certDir: %q}
leaderElection: {leaderElect: false}
internalCertManagement: {enable: false}
clientConnection: {qps: 200, burst: 400}
manageJobsWithoutQueueName: %t
managedJobsNamespaceSelector:
  matchExpressions:
  - {key: kubernetes.io/metadata.name, operator: NotIn, values: [kube-system, %s]}
featureGates: {VisibilityOnDemand: false}
objectRetentionPolicies:
  workloads: {afterFinished: 0s}
integrations:
  frameworks: ["batch/job", "pod"]
`, kueueNamespace, healthPort, webhookPort, certDir, o.ManageJobsWithoutQueueName, kueueNamespace)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	k.proc, err = cp.runAt("kueue", filepath.Join(dir, "kueue"), []string{"KUBECONFIG=" + cp.kubeconfig, "KUEUE_METRICS_CERT_DIR=" + certDir},
		"--config="+cfgPath, fmt.Sprintf("--visibility-server-port=%d", visibilityPort))
	if err != nil {
		return nil, err
	}
	plain := &http.Client{Timeout: 2 * time.Second}
	if err := cp.waitHTTP(k.proc, plain, fmt.Sprintf("http://127.0.0.1:%d/readyz", healthPort), "ok"); err != nil {
		return nil, err
	}
	tReady := time.Since(t0)
	if err := k.installWebhooks(ctx, filepath.Join(dir, "kueue-webhooks.yaml"), webhookPort, caPEM); err != nil {
		return nil, err
	}
	// The webhooks answer once a Kueue object can be written through them.
	probe := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
		"metadata": map[string]any{"name": "kubeharness-probe"},
	}}
	var last error
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, cp.opts.StartTimeout, true, func(ctx context.Context) (bool, error) {
		if k.proc.exited() {
			return false, fmt.Errorf("kueue exited; log tail:\n%s", tail(cp.ComponentLog("kueue"), 30))
		}
		_, last = dyn.Resource(KueueResourceFlavor).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return last == nil, nil
	})
	if err != nil {
		return nil, fmt.Errorf("kubeharness: Kueue's webhooks do not answer: %w (last: %v)", err, last)
	}
	cp.tb.Logf("kubeharness: Kueue %s up in %v (CRDs %v, manager ready %v)", KueueVersion,
		time.Since(t0).Round(time.Millisecond), tCRD.Round(time.Millisecond), tReady.Round(time.Millisecond))
	return k, nil
}

// Dynamic returns the dynamic client the harness uses for Kueue's objects.
func (k *Kueue) Dynamic() dynamic.Interface { return k.dyn }

// installCRDs creates every CRD of path and waits until each is
// Established.
func (k *Kueue) installCRDs(ctx context.Context, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 1<<16)
	var names []string
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return fmt.Errorf("kubeharness: decode %s: %w", path, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if _, err := k.dyn.Resource(crdGVR).Create(ctx, &u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("kubeharness: create CRD %s: %w", u.GetName(), err)
		}
		names = append(names, u.GetName())
	}
	for _, n := range names {
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			u, err := k.dyn.Resource(crdGVR).Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, c := range conds {
				if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("kubeharness: CRD %s not established: %w", n, err)
		}
	}
	return nil
}

// installWebhooks creates Kueue's webhook configurations with only the
// webhooks of what the harness's Kueue serves (its own kinds, pods and
// Jobs), each calling https://127.0.0.1:<port><path> with caPEM as its
// caBundle.
func (k *Kueue) installWebhooks(ctx context.Context, path string, port int, caPEM []byte) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	served := func(p string) bool {
		return strings.Contains(p, "-kueue-x-k8s-io-") || strings.HasSuffix(p, "-batch-v1-job") || strings.HasSuffix(p, "--v1-pod")
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 1<<16)
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return fmt.Errorf("kubeharness: decode %s: %w", path, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		hooks, _, _ := unstructured.NestedSlice(u.Object, "webhooks")
		var keep []any
		for _, h := range hooks {
			m := h.(map[string]any)
			p, _, _ := unstructured.NestedString(m, "clientConfig", "service", "path")
			if !served(p) {
				continue
			}
			m["clientConfig"] = map[string]any{
				"url":      fmt.Sprintf("https://127.0.0.1:%d%s", port, p),
				"caBundle": base64.StdEncoding.EncodeToString(caPEM),
			}
			if strings.HasSuffix(p, "--v1-pod") {
				m["namespaceSelector"] = map[string]any{"matchExpressions": []any{map[string]any{
					"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": []any{"kube-system", kueueNamespace},
				}}}
			}
			keep = append(keep, m)
		}
		u.Object["webhooks"] = keep
		u.SetName("kueue-" + u.GetName())
		gvr := schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1",
			Resource: strings.ToLower(u.GetKind()) + "s"}
		if _, err := k.dyn.Resource(gvr).Create(ctx, &u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("kubeharness: create %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	return nil
}

// writeWebhookCerts writes a CA and a serving certificate for 127.0.0.1
// (and the name a webhook Service of Kueue's would have) as tls.crt and
// tls.key into dir, and returns the CA's PEM.
func writeWebhookCerts(dir string) ([]byte, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kubeharness-kueue-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kueue-webhook-service.kueue-system.svc"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		DNSNames:    []string{"kueue-webhook-service.kueue-system.svc", "localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), nil
}

// GKE's node label that says how a node's VM is bought; the harness's
// flavors select nodes by it.
const LabelProvisioning = "cloud.google.com/gke-provisioning"

// KueueFlavor is a ResourceFlavor and its google.com/tpu quota in a
// ClusterQueue.
type KueueFlavor struct {
	Name string
	// NodeLabels select the flavor's nodes (ResourceFlavor.spec.nodeLabels).
	NodeLabels map[string]string
	// TPU is the flavor's nominal quota of google.com/tpu chips.
	TPU int
	// BorrowingLimit, if set, caps what the ClusterQueue may borrow from
	// its cohort in this flavor.
	BorrowingLimit *int
	// TopologyName, if set, makes the flavor topology-aware
	// (ResourceFlavor.spec.topologyName, a Topology of AddTopology).
	TopologyName string
}

// OnDemandFlavor and SpotFlavor are the two flavors of a GKE TPU
// cluster's ClusterQueue: nodes labelled cloud.google.com/gke-provisioning
// standard and spot (give node pools OnDemandLabels or SpotLabels).
func OnDemandFlavor(tpu int) KueueFlavor {
	return KueueFlavor{Name: "on-demand", NodeLabels: OnDemandLabels(), TPU: tpu}
}

// SpotFlavor: see OnDemandFlavor.
func SpotFlavor(tpu int) KueueFlavor {
	return KueueFlavor{Name: "spot", NodeLabels: SpotLabels(), TPU: tpu}
}

// OnDemandLabels are the node labels of on-demand VMs (NodePool.Labels).
func OnDemandLabels() map[string]string { return map[string]string{LabelProvisioning: "standard"} }

// SpotLabels are the node labels of Spot VMs (NodePool.Labels), GKE's
// cloud.google.com/gke-spot included.
func SpotLabels() map[string]string {
	return map[string]string{LabelProvisioning: "spot", "cloud.google.com/gke-spot": "true"}
}

// KueueQueue is a ClusterQueue with its flavors' TPU quota and a
// LocalQueue pointing at it.
type KueueQueue struct {
	ClusterQueue string
	// LocalQueue in Namespace ("default" if empty); none if LocalQueue is
	// empty.
	LocalQueue, Namespace string
	// Cohort, if set, lets ClusterQueues of one cohort borrow each
	// other's unused quota.
	Cohort  string
	Flavors []KueueFlavor
	// Preemption is the ClusterQueue's withinClusterQueue policy: Never,
	// LowerPriority (the default here) or LowerOrNewerEqualPriority.
	Preemption string
	// Provisioning, if set, gives the ClusterQueue Kueue's
	// ProvisioningRequest admission check, as GKE's flex-start (Dynamic
	// Workload Scheduler) guide sets it up: an AdmissionCheck of
	// controllerName kueue.x-k8s.io/provisioning-request and its
	// ProvisioningRequestConfig. Kueue then makes a ProvisioningRequest
	// for each workload it reserves quota for, and admits the workload
	// once the request is Provisioned. The ProvisioningRequest CRD must be
	// served when Kueue starts (start the autoscaler with
	// ProvisioningRequests first), or Kueue leaves the check inactive.
	Provisioning *KueueProvisioning
}

// KueueProvisioning is a ProvisioningRequest admission check.
type KueueProvisioning struct {
	// Class is the requests' provisioningClassName; default
	// queued-provisioning.gke.io.
	Class string
	// Retries is the config's retryStrategy.backoffLimitCount: how many
	// times Kueue asks again after a request failed before it rejects
	// the workload (deactivates it). The harness's default is 0, so that a
	// failed request rejects the workload at once (Kueue's own default is
	// 3, with a backoff from 60 s).
	Retries int
}

// ProvisioningCheckName is the AdmissionCheck (and its
// ProvisioningRequestConfig) AddQueue makes for ClusterQueue cq.
func ProvisioningCheckName(cq string) string { return cq + "-provisioning" }

// AddQueue creates the flavors (if missing), the ClusterQueue and the
// LocalQueue of q.
func (k *Kueue) AddQueue(ctx context.Context, q KueueQueue) error {
	if q.Namespace == "" {
		q.Namespace = "default"
	}
	if q.Preemption == "" {
		q.Preemption = "LowerPriority"
	}
	var flavors []any
	for _, f := range q.Flavors {
		labels := map[string]any{}
		for k, v := range f.NodeLabels {
			labels[k] = v
		}
		rfSpec := map[string]any{"nodeLabels": labels}
		if f.TopologyName != "" {
			rfSpec["topologyName"] = f.TopologyName
		}
		rf := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
			"metadata": map[string]any{"name": f.Name},
			"spec":     rfSpec,
		}}
		if err := k.create(ctx, KueueResourceFlavor, "", rf); err != nil {
			return err
		}
		res := map[string]any{"name": "google.com/tpu", "nominalQuota": fmt.Sprint(f.TPU)}
		if f.BorrowingLimit != nil {
			res["borrowingLimit"] = fmt.Sprint(*f.BorrowingLimit)
		}
		flavors = append(flavors, map[string]any{"name": f.Name, "resources": []any{res}})
	}
	spec := map[string]any{
		"namespaceSelector": map[string]any{},
		"resourceGroups":    []any{map[string]any{"coveredResources": []any{"google.com/tpu"}, "flavors": flavors}},
		"preemption":        map[string]any{"withinClusterQueue": q.Preemption},
	}
	if q.Cohort != "" {
		spec["cohortName"] = q.Cohort
	}
	if q.Provisioning != nil {
		name, err := k.addProvisioningCheck(ctx, q.ClusterQueue, *q.Provisioning)
		if err != nil {
			return err
		}
		spec["admissionChecksStrategy"] = map[string]any{"admissionChecks": []any{map[string]any{"name": name}}}
	}
	cq := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
		"metadata": map[string]any{"name": q.ClusterQueue}, "spec": spec,
	}}
	if err := k.create(ctx, KueueClusterQueues, "", cq); err != nil {
		return err
	}
	if q.LocalQueue == "" {
		return nil
	}
	lq := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
		"metadata": map[string]any{"name": q.LocalQueue, "namespace": q.Namespace},
		"spec":     map[string]any{"clusterQueue": q.ClusterQueue},
	}}
	if err := k.create(ctx, KueueLocalQueues, q.Namespace, lq); err != nil {
		return err
	}
	// Kueue marks a queue Active once its flavors exist.
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		u, err := k.dyn.Resource(KueueLocalQueues).Namespace(q.Namespace).Get(ctx, q.LocalQueue, metav1.GetOptions{})
		return err == nil && condTrue(u, "Active"), nil
	})
}

// addProvisioningCheck creates ClusterQueue cq's ProvisioningRequestConfig
// and AdmissionCheck and waits until Kueue marks the check Active.
func (k *Kueue) addProvisioningCheck(ctx context.Context, cq string, p KueueProvisioning) (string, error) {
	if p.Class == "" {
		p.Class = "queued-provisioning.gke.io"
	}
	name := ProvisioningCheckName(cq)
	prc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ProvisioningRequestConfig",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{
			"provisioningClassName": p.Class,
			"managedResources":      []any{"google.com/tpu"},
			"retryStrategy": map[string]any{
				"backoffLimitCount": int64(p.Retries), "backoffBaseSeconds": int64(1), "backoffMaxSeconds": int64(2),
			},
		},
	}}
	if err := k.create(ctx, KueueProvReqConfig, "", prc); err != nil {
		return "", err
	}
	ac := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{
			"controllerName": "kueue.x-k8s.io/provisioning-request",
			"parameters":     map[string]any{"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig", "name": name},
		},
	}}
	if err := k.create(ctx, KueueAdmissionCheck, "", ac); err != nil {
		return "", err
	}
	var last *unstructured.Unstructured
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		u, err := k.dyn.Resource(KueueAdmissionCheck).Get(ctx, name, metav1.GetOptions{})
		last = u
		return err == nil && condTrue(u, "Active"), nil
	})
	if err != nil {
		var conds any
		if last != nil {
			conds, _, _ = unstructured.NestedSlice(last.Object, "status", "conditions")
		}
		return "", fmt.Errorf("kubeharness: AdmissionCheck %s not Active (is the ProvisioningRequest CRD served? start the autoscaler with ProvisioningRequests before Kueue): %w; conditions %v", name, err, conds)
	}
	return name, nil
}

// AddTopology creates a Topology for Kueue's topology-aware scheduling:
// levels are node label keys, from the widest domain to the narrowest
// (for a GKE TPU cluster: cloud.google.com/gke-nodepool, a slice, then
// kubernetes.io/hostname, a host).
func (k *Kueue) AddTopology(ctx context.Context, name string, levels ...string) error {
	var ls []any
	for _, l := range levels {
		ls = append(ls, map[string]any{"nodeLabel": l})
	}
	t := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology",
		"metadata": map[string]any{"name": name}, "spec": map[string]any{"levels": ls},
	}}
	return k.create(ctx, KueueTopologies, "", t)
}

// AddPriorityClass creates a WorkloadPriorityClass: workloads labelled
// kueue.x-k8s.io/priority-class=<name> get its value.
func (k *Kueue) AddPriorityClass(ctx context.Context, name string, value int) error {
	pc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
		"metadata": map[string]any{"name": name}, "value": int64(value),
	}}
	return k.create(ctx, KueuePriorities, "", pc)
}

// Workloads lists the Workloads of a namespace.
func (k *Kueue) Workloads(ctx context.Context, namespace string) ([]unstructured.Unstructured, error) {
	l, err := k.dyn.Resource(KueueWorkloads).Namespace(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// ClusterQueueUsage returns the google.com/tpu chips a ClusterQueue has
// admitted, per flavor (status.flavorsReservation).
func (k *Kueue) ClusterQueueUsage(ctx context.Context, name string) (map[string]int64, error) {
	u, err := k.dyn.Resource(KueueClusterQueues).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	fl, _, _ := unstructured.NestedSlice(u.Object, "status", "flavorsReservation")
	for _, f := range fl {
		m, _ := f.(map[string]any)
		name, _ := m["name"].(string)
		rs, _ := m["resources"].([]any)
		for _, r := range rs {
			rm, _ := r.(map[string]any)
			if rm["name"] != "google.com/tpu" {
				continue
			}
			var n int64
			fmt.Sscan(fmt.Sprint(rm["total"]), &n)
			out[name] = n
		}
	}
	return out, nil
}

// create creates u, retrying while Kueue's webhooks do not answer yet.
func (k *Kueue) create(ctx context.Context, gvr schema.GroupVersionResource, ns string, u *unstructured.Unstructured) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var ri dynamic.ResourceInterface = k.dyn.Resource(gvr)
		if ns != "" {
			ri = k.dyn.Resource(gvr).Namespace(ns)
		}
		_, last = ri.Create(ctx, u, metav1.CreateOptions{})
		if last == nil || apierrors.IsAlreadyExists(last) {
			last = nil
			return true, nil
		}
		return !strings.Contains(last.Error(), "failed calling webhook"), nil
	})
	if last != nil {
		return fmt.Errorf("kubeharness: create %s %s: %w", u.GetKind(), u.GetName(), last)
	}
	if err != nil {
		return fmt.Errorf("kubeharness: create %s %s: %w", u.GetKind(), u.GetName(), err)
	}
	return nil
}

// condTrue reports whether u's status has condition typ True.
func condTrue(u *unstructured.Unstructured, typ string) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == typ && m["status"] == "True" {
			return true
		}
	}
	return false
}
