//go:build e2e

package kubeharness

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
)

// WaitForPod watches namespace/name until cond holds and returns the pod.
// cond sees nil when the pod does not exist (so a test can wait for a
// deletion). It returns ctx.Err() with the last state seen when ctx ends.
func (cp *ControlPlane) WaitForPod(ctx context.Context, namespace, name string, cond func(*corev1.Pod) bool) (*corev1.Pod, error) {
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	var last *corev1.Pod
	done := func(pods []corev1.Pod) bool {
		last = nil
		if len(pods) > 0 {
			last = &pods[0]
		}
		return cond(last)
	}
	err := cp.watchPods(ctx, namespace, metav1.ListOptions{FieldSelector: sel}, done, func(ev watch.Event, p *corev1.Pod) bool {
		if ev.Type == watch.Deleted {
			last = nil
		} else {
			last = p
		}
		return cond(last)
	})
	if err != nil {
		return last, fmt.Errorf("wait for pod %s/%s: %w (last seen: %s)", namespace, name, err, describePod(last))
	}
	return last, nil
}

// WaitForPods watches the pods of namespace matching labelSelector until n
// (≥ 1) of them satisfy cond, and returns those. To wait for none, use
// WaitForPodsGone.
func (cp *ControlPlane) WaitForPods(ctx context.Context, namespace, labelSelector string, n int, cond func(*corev1.Pod) bool) ([]*corev1.Pod, error) {
	ok := map[types.UID]*corev1.Pod{}
	add := func(p *corev1.Pod, deleted bool) {
		if !deleted && cond(p) {
			ok[p.UID] = p
		} else {
			delete(ok, p.UID)
		}
	}
	err := cp.watchPods(ctx, namespace, metav1.ListOptions{LabelSelector: labelSelector}, func(pods []corev1.Pod) bool {
		clear(ok)
		for i := range pods {
			add(&pods[i], false)
		}
		return len(ok) >= n
	}, func(ev watch.Event, p *corev1.Pod) bool {
		add(p, ev.Type == watch.Deleted)
		return len(ok) >= n
	})
	out := make([]*corev1.Pod, 0, len(ok))
	for _, p := range ok {
		out = append(out, p)
	}
	if err != nil {
		return out, fmt.Errorf("wait for %d pods %q in %s: %d satisfied: %w", n, labelSelector, namespace, len(ok), err)
	}
	return out, nil
}

// WaitForPodsGone watches until no pod of namespace matches labelSelector.
func (cp *ControlPlane) WaitForPodsGone(ctx context.Context, namespace, labelSelector string) error {
	left := map[types.UID]bool{}
	err := cp.watchPods(ctx, namespace, metav1.ListOptions{LabelSelector: labelSelector}, func(pods []corev1.Pod) bool {
		clear(left)
		for i := range pods {
			left[pods[i].UID] = true
		}
		return len(left) == 0
	}, func(ev watch.Event, p *corev1.Pod) bool {
		if ev.Type == watch.Deleted {
			delete(left, p.UID)
		} else {
			left[p.UID] = true
		}
		return len(left) == 0
	})
	if err != nil {
		return fmt.Errorf("wait for pods %q in %s to go: %d left: %w", labelSelector, namespace, len(left), err)
	}
	return nil
}

// watchPods lists, then watches from the list's resourceVersion, calling
// listed and event until one returns true; it re-lists when the watch ends.
func (cp *ControlPlane) watchPods(ctx context.Context, ns string, opts metav1.ListOptions,
	listed func([]corev1.Pod) bool, event func(watch.Event, *corev1.Pod) bool) error {
	pods := cp.client.CoreV1().Pods(ns)
	for {
		list, err := pods.List(ctx, opts)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		if listed(list.Items) {
			return nil
		}
		wopts := opts
		wopts.ResourceVersion = list.ResourceVersion
		w, err := pods.Watch(ctx, wopts)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			continue
		}
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				break // an error event: re-list
			}
			if event(ev, p) {
				w.Stop()
				return nil
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

func describePod(p *corev1.Pod) string {
	if p == nil {
		return "no pod"
	}
	s := fmt.Sprintf("phase %s node %q ip %q", p.Status.Phase, p.Spec.NodeName, p.Status.PodIP)
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			s += fmt.Sprintf("; %s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	return s
}

// NewTestProgramPod returns a pod of one container "main" running the test
// program (ImageTestProgram) with args, restartPolicy Never, in namespace
// "default". Tests add node selectors and resources.
func NewTestProgramPod(name string, args ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "main", Image: ImageTestProgram, Args: args}},
		},
	}
}

// TPUSelector returns the GKE node selector of a TPU slice shape: the
// accelerator and topology labels, as a GKE TPU workload sets them.
func TPUSelector(generation, topology string) (map[string]string, error) {
	g, err := lookupGeneration(generation)
	if err != nil {
		return nil, err
	}
	return map[string]string{LabelTPUAccelerator: g.accelerator, LabelTPUTopology: topology}, nil
}
