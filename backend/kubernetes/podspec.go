package kubernetes

import (
	"fmt"
	"maps"
	"strconv"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/goray-dev/goray/worker"
)

// This file builds the objects the runner creates: the token Secret, the
// headless Service and the worker pods.

// The keys of the cluster's Secret: the worker token and the workers' TLS
// credentials (the CA's certificate, and the certificate and key every
// worker of the handle serves with). The names of the TLS keys are those
// of a kubernetes.io/tls Secret, so that the Secret can also be mounted
// as a directory for worker.EnvTLSDir.
const (
	secretTokenKey = "token"
	secretCAKey    = worker.FileCA
	secretCertKey  = worker.FileCert
	secretKeyKey   = worker.FileKey
)

// podTemplate is what every worker pod of one cluster handle shares.
type podTemplate struct {
	cfg     Config
	cluster string
	secret  string // the first token Secret's name
	service string // the headless Service's name
	owner   metav1.OwnerReference
	// renewed is the Secret with the newest certificates, once the runner
	// has renewed them (renew.go); new pods take their credentials from it.
	renewed atomic.Pointer[string]
}

// secretName is the Secret new pods take their token and credentials from.
func (pt *podTemplate) secretName() string {
	if n := pt.renewed.Load(); n != nil {
		return *n
	}
	return pt.secret
}

// baseLabels are the labels of every object of the cluster handle.
func (pt *podTemplate) baseLabels() map[string]string {
	return map[string]string{LabelCluster: pt.cluster, labelManagedBy: managedBy}
}

func newSecret(name, ns, cluster, token string, creds worker.Credentials) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Labels: map[string]string{LabelCluster: cluster, labelManagedBy: managedBy}},
		Type:      corev1.SecretTypeOpaque,
		Immutable: new(true),
		Data: map[string][]byte{secretTokenKey: []byte(token),
			secretCAKey: creds.CA, secretCertKey: creds.Cert, secretKeyKey: creds.Key},
	}
}

// headlessService gives every TPU worker pod the DNS name
// <hostname>.<service>.<namespace>.svc, so that TPU_WORKER_HOSTNAMES
// resolve before the pods are ready (publishNotReadyAddresses).
func (pt *podTemplate) headlessService() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: pt.service, Namespace: pt.cfg.Namespace, Labels: pt.baseLabels(),
			OwnerReferences: []metav1.OwnerReference{pt.owner}},
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			Selector:                 map[string]string{LabelCluster: pt.cluster},
			PublishNotReadyAddresses: true,
			Ports:                    []corev1.ServicePort{{Name: "worker", Port: pt.cfg.Worker.Port}},
		},
	}
}

// fromSecret is the env variable name taking the value of key in the
// cluster's Secret: a secretKeyRef, never a literal in the pod spec.
func (pt *podTemplate) fromSecret(name, key string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: pt.secretName()}, Key: key}}}
}

// podSpec describes one worker pod.
type podSpec struct {
	name     string
	node     string            // the Kubernetes node it is pinned to
	chips    int               // google.com/tpu to request; 0 for CPU pods
	tpuHost  bool              // a CPU pod on a TPU host (work placed there outside a reservation)
	hostname string            // TPU pods: their DNS name in the Service
	labels   map[string]string // added to the base labels
	env      map[string]string // the reservation's env of the host
}

// pod builds the worker pod of s.
func (pt *podTemplate) pod(s podSpec) *corev1.Pod {
	w := pt.cfg.Worker
	lbl := maps.Clone(pt.cfg.Pod.Labels)
	if lbl == nil {
		lbl = map[string]string{}
	}
	maps.Copy(lbl, pt.baseLabels())
	maps.Copy(lbl, s.labels)
	lbl[LabelNode] = labelValue(s.node)

	env := []corev1.EnvVar{
		{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: worker.EnvAddr, Value: "$(POD_IP):" + strconv.Itoa(int(w.Port))},
		pt.fromSecret(worker.EnvToken, secretTokenKey),
		pt.fromSecret(worker.EnvTLSCA, secretCAKey),
		pt.fromSecret(worker.EnvTLSCert, secretCertKey),
		pt.fromSecret(worker.EnvTLSKey, secretKeyKey),
		{Name: worker.EnvIdleTimeout, Value: w.IdleTimeout.String()},
		{Name: worker.EnvOutputTee, Value: "1"}, // the pod's log keeps every line
	}
	if w.LogLevel != "" {
		env = append(env, corev1.EnvVar{Name: worker.EnvLogLevel, Value: w.LogLevel})
	}
	for _, k := range sortedKeys(s.env) {
		env = append(env, corev1.EnvVar{Name: k, Value: s.env[k]})
	}

	res := corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}
	setBoth := func(name corev1.ResourceName, q resource.Quantity) {
		res.Requests[name], res.Limits[name] = q, q
	}
	if q, err := parseQuantity(w.CPU); err == nil && w.CPU != "" {
		setBoth(corev1.ResourceCPU, q)
	}
	if q, err := parseQuantity(w.Memory); err == nil && w.Memory != "" {
		setBoth(corev1.ResourceMemory, q)
	}
	tolerations := append([]corev1.Toleration(nil), pt.cfg.Pod.Tolerations...)
	var nodeSelector map[string]string
	tpuToleration := corev1.Toleration{Key: string(resourceTPU), Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	switch {
	case s.chips > 0:
		setBoth(resourceTPU, *resource.NewQuantity(int64(s.chips), resource.DecimalSI))
		tolerations = append(tolerations, tpuToleration)
	case s.tpuHost:
		// Pinned to its TPU node (below) as work the runtime placed
		// there: it tolerates GKE's TPU taint, which the admission plugin
		// adds only to pods requesting google.com/tpu, and does not take
		// the CPU nodes' selector, which a TPU node need not match.
		tolerations = append(tolerations, tpuToleration)
	case len(pt.cfg.Pod.NodeSelector) > 0:
		nodeSelector = maps.Clone(pt.cfg.Pod.NodeSelector)
	}

	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: s.name, Namespace: pt.cfg.Namespace, Labels: lbl,
			Annotations:     maps.Clone(pt.cfg.Pod.Annotations),
			OwnerReferences: []metav1.OwnerReference{pt.owner},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:      corev1.RestartPolicyNever,
			ServiceAccountName: w.ServiceAccount,
			PriorityClassName:  pt.cfg.Pod.PriorityClassName,
			Tolerations:        tolerations,
			NodeSelector:       nodeSelector,
			// Pinned to its node through the scheduler (as DaemonSets pin
			// theirs), so that the node's google.com/tpu is accounted.
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
					NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
						Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{s.node},
					}}}},
				},
			}},
			AutomountServiceAccountToken: new(false),
			Containers: []corev1.Container{{
				Name: "worker", Image: w.Image, Command: w.Command, Args: w.Args,
				Env:       env,
				Ports:     []corev1.ContainerPort{{Name: "worker", ContainerPort: w.Port}},
				Resources: res,
			}},
		},
	}
	if s.hostname != "" {
		p.Spec.Hostname, p.Spec.Subdomain = s.hostname, pt.service
	}
	return p
}

const envMegascaleCoordinator = "MEGASCALE_COORDINATOR_ADDRESS"

// podProblem returns why a pod will not start, or "" while it may.
func podProblem(p *corev1.Pod) string {
	switch p.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		return fmt.Sprintf("pod %s ended (%s: %s %s)", p.Name, p.Status.Phase, p.Status.Reason, p.Status.Message)
	}
	for _, c := range p.Status.ContainerStatuses {
		if w := c.State.Waiting; w != nil {
			switch w.Reason {
			case "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError", "CreateContainerError":
				return fmt.Sprintf("pod %s cannot start: %s: %s", p.Name, w.Reason, w.Message)
			}
		}
		if t := c.State.Terminated; t != nil {
			return fmt.Sprintf("pod %s: worker exited with code %d (%s)", p.Name, t.ExitCode, t.Reason)
		}
	}
	return ""
}
