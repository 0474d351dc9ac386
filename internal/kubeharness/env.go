//go:build e2e

package kubeharness

import (
	"context"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// envList is a container's environment in kubelet order: later names
// replace earlier ones in place.
type envList struct {
	names []string
	vals  map[string]string
}

func newEnvList() *envList { return &envList{vals: make(map[string]string)} }

func (e *envList) set(k, v string) {
	if _, ok := e.vals[k]; !ok {
		e.names = append(e.names, k)
	}
	e.vals[k] = v
}

func (e *envList) list() []string {
	out := make([]string, 0, len(e.names))
	for _, k := range e.names {
		out = append(out, k+"="+e.vals[k])
	}
	return out
}

// expand replaces $(NAME) with the value of NAME when it is defined and
// $$ with $, leaving anything else as it is (the kubelet's rules for env
// values, command and args).
func (e *envList) expand(s string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteByte('$')
				continue
			}
			name := s[i+2 : i+2+end]
			if v, ok := e.vals[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// env builds a container's environment: a base (PATH, HOME, HOSTNAME,
// KUBERNETES_SERVICE_*), the harness's downward values (POD_NAME,
// POD_NAMESPACE, POD_UID, POD_IP, NODE_NAME, HOST_IP), then the container's
// envFrom and env, which may override any of them.
func (r *podRun) env(ctx context.Context, c corev1.Container) (*envList, error) {
	pod := r.pod
	e := newEnvList()
	e.set("PATH", os.Getenv("PATH"))
	e.set("HOME", r.dir)
	hostname := pod.Name
	if pod.Spec.Hostname != "" {
		hostname = pod.Spec.Hostname
	}
	e.set("HOSTNAME", hostname)
	e.set("KUBERNETES_SERVICE_HOST", r.a.cfg.apiHost)
	e.set("KUBERNETES_SERVICE_PORT", r.a.cfg.apiPort)
	e.set("POD_NAME", pod.Name)
	e.set("POD_NAMESPACE", pod.Namespace)
	e.set("POD_UID", string(pod.UID))
	e.set("POD_IP", r.ip)
	e.set("NODE_NAME", pod.Spec.NodeName)
	e.set("HOST_IP", r.hostIP)
	if r.a.cfg.images.isTestProgram(c.Image) {
		e.set(envTestProgram, "1")
	}
	for _, from := range c.EnvFrom {
		data, err := r.envSource(ctx, from)
		if err != nil {
			return nil, fmt.Errorf("container %q envFrom: %w", c.Name, err)
		}
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			e.set(from.Prefix+k, data[k])
		}
	}
	for _, v := range c.Env {
		if v.ValueFrom == nil {
			e.set(v.Name, e.expand(v.Value))
			continue
		}
		val, ok, err := r.envValueFrom(ctx, c, v.ValueFrom)
		if err != nil {
			return nil, fmt.Errorf("container %q env %s: %w", c.Name, v.Name, err)
		}
		if ok {
			e.set(v.Name, val)
		}
	}
	return e, nil
}

func (r *podRun) envSource(ctx context.Context, from corev1.EnvFromSource) (map[string]string, error) {
	ns := r.pod.Namespace
	switch {
	case from.ConfigMapRef != nil:
		cm, err := r.a.client.CoreV1().ConfigMaps(ns).Get(ctx, from.ConfigMapRef.Name, metav1.GetOptions{})
		if err != nil {
			if isOptional(from.ConfigMapRef.Optional) {
				return nil, nil
			}
			return nil, err
		}
		return cm.Data, nil
	case from.SecretRef != nil:
		s, err := r.a.client.CoreV1().Secrets(ns).Get(ctx, from.SecretRef.Name, metav1.GetOptions{})
		if err != nil {
			if isOptional(from.SecretRef.Optional) {
				return nil, nil
			}
			return nil, err
		}
		out := make(map[string]string, len(s.Data))
		for k, v := range s.Data {
			out[k] = string(v)
		}
		return out, nil
	}
	return nil, nil
}

func isOptional(b *bool) bool { return b != nil && *b }

// envValueFrom resolves a valueFrom; ok is false for a missing optional key.
func (r *podRun) envValueFrom(ctx context.Context, c corev1.Container, src *corev1.EnvVarSource) (string, bool, error) {
	pod := r.pod
	ns := pod.Namespace
	switch {
	case src.FieldRef != nil:
		v, err := r.fieldRef(src.FieldRef.FieldPath)
		return v, err == nil, err
	case src.ResourceFieldRef != nil:
		v, err := resourceFieldRef(pod, c, src.ResourceFieldRef)
		return v, err == nil, err
	case src.ConfigMapKeyRef != nil:
		ref := src.ConfigMapKeyRef
		cm, err := r.a.client.CoreV1().ConfigMaps(ns).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return "", false, optionalErr(ref.Optional, err)
		}
		v, ok := cm.Data[ref.Key]
		if !ok {
			return "", false, optionalErr(ref.Optional, fmt.Errorf("configmap %s has no key %q", ref.Name, ref.Key))
		}
		return v, true, nil
	case src.SecretKeyRef != nil:
		ref := src.SecretKeyRef
		s, err := r.a.client.CoreV1().Secrets(ns).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return "", false, optionalErr(ref.Optional, err)
		}
		v, ok := s.Data[ref.Key]
		if !ok {
			return "", false, optionalErr(ref.Optional, fmt.Errorf("secret %s has no key %q", ref.Name, ref.Key))
		}
		return string(v), true, nil
	}
	return "", false, fmt.Errorf("unsupported valueFrom")
}

func optionalErr(optional *bool, err error) error {
	if isOptional(optional) {
		return nil
	}
	return err
}

// fieldRef resolves the downward API fields the kubelet supports in env.
func (r *podRun) fieldRef(path string) (string, error) {
	pod := r.pod
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP", "status.podIPs":
		return r.ip, nil
	case "status.hostIP", "status.hostIPs":
		return r.hostIP, nil
	}
	for prefix, m := range map[string]map[string]string{"metadata.labels": pod.Labels, "metadata.annotations": pod.Annotations} {
		if path == prefix {
			var lines []string
			for k, v := range m {
				lines = append(lines, fmt.Sprintf("%s=%q", k, v))
			}
			sort.Strings(lines)
			return strings.Join(lines, "\n"), nil
		}
		if strings.HasPrefix(path, prefix+"['") && strings.HasSuffix(path, "']") {
			return m[path[len(prefix)+2:len(path)-2]], nil
		}
	}
	return "", fmt.Errorf("unsupported fieldRef %q", path)
}

// resourceFieldRef resolves limits.* / requests.* of a container, rounded
// up by the divisor as the kubelet does.
func resourceFieldRef(pod *corev1.Pod, c corev1.Container, ref *corev1.ResourceFieldSelector) (string, error) {
	if ref.ContainerName != "" && ref.ContainerName != c.Name {
		found := false
		for _, o := range append(append([]corev1.Container(nil), pod.Spec.Containers...), pod.Spec.InitContainers...) {
			if o.Name == ref.ContainerName {
				c, found = o, true
			}
		}
		if !found {
			return "", fmt.Errorf("no container %q", ref.ContainerName)
		}
	}
	kind, name, ok := strings.Cut(ref.Resource, ".")
	if !ok || (kind != "limits" && kind != "requests") {
		return "", fmt.Errorf("unsupported resource %q", ref.Resource)
	}
	list := c.Resources.Limits
	if kind == "requests" {
		list = c.Resources.Requests
	}
	q, ok := list[corev1.ResourceName(name)]
	if !ok {
		return "0", nil
	}
	div := ref.Divisor
	if div.IsZero() {
		div = resource.MustParse("1")
	}
	return fmt.Sprint(int64(math.Ceil(q.AsApproximateFloat64() / div.AsApproximateFloat64()))), nil
}
