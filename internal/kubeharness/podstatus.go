//go:build e2e

package kubeharness

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// markNodeLost sets what the pod garbage collector sets on a pod whose node
// is gone.
func markNodeLost(st *corev1.PodStatus) {
	st.Phase = corev1.PodFailed
	setCondition(st, corev1.PodCondition{
		Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "DeletionByPodGC",
		Message: "PodGC: node no longer exists", LastTransitionTime: metav1.Now(),
	})
}

func (r *podRun) publish() {
	if r.a.ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(r.a.ctx, 30*time.Second)
	defer cancel()
	r.publishCtx(ctx, nil)
}

// publishCtx writes the pod status with UpdateStatus, re-reading the pod on
// a conflict. extra, if set, edits the status last.
func (r *podRun) publishCtx(ctx context.Context, extra func(*corev1.PodStatus)) {
	pods := r.a.client.CoreV1().Pods(r.pod.Namespace)
	for attempt := 0; attempt < 10; attempt++ {
		p := r.last.DeepCopy()
		r.fillStatus(&p.Status)
		if extra != nil {
			extra(&p.Status)
		}
		updated, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{FieldManager: "kubeharness-node-agent"})
		if err == nil {
			r.last = updated
			return
		}
		if apierrors.IsNotFound(err) || ctx.Err() != nil {
			return
		}
		if !apierrors.IsConflict(err) {
			r.a.cfg.logf("kubeharness: node agent: status of pod %s/%s: %v", r.pod.Namespace, r.pod.Name, err)
			time.Sleep(100 * time.Millisecond)
		}
		fresh, err := pods.Get(ctx, r.pod.Name, metav1.GetOptions{})
		if err != nil {
			if !apierrors.IsNotFound(err) && !errors.Is(err, context.Canceled) {
				r.a.cfg.logf("kubeharness: node agent: read pod %s/%s: %v", r.pod.Namespace, r.pod.Name, err)
			}
			return
		}
		if fresh.UID != r.uid {
			return
		}
		r.last = fresh
	}
}

// fillStatus writes the fields the agent owns into st, keeping the others
// (PodScheduled, qosClass, …).
func (r *podRun) fillStatus(st *corev1.PodStatus) {
	phase := r.phase()
	st.Phase = phase
	st.HostIP = r.hostIP
	st.HostIPs = []corev1.HostIP{{IP: r.hostIP}}
	st.PodIP, st.PodIPs = r.ip, nil
	if r.ip != "" { // no IP when the pod's network could not be made
		st.PodIPs = []corev1.PodIP{{IP: r.ip}}
	}
	st.StartTime = &r.startTime
	st.InitContainerStatuses = nil
	for _, c := range r.init {
		st.InitContainerStatuses = append(st.InitContainerStatuses, c.status)
	}
	st.ContainerStatuses = nil
	ready := phase == corev1.PodRunning
	for _, c := range r.main {
		st.ContainerStatuses = append(st.ContainerStatuses, c.status)
		ready = ready && c.status.Ready
	}
	initialized := true
	for _, c := range r.init {
		initialized = initialized && (c.sidecar || c.initDone)
	}
	now := metav1.Now()
	cond := func(t corev1.PodConditionType, ok bool, reason string) {
		s := corev1.ConditionFalse
		if ok {
			s, reason = corev1.ConditionTrue, ""
		}
		setCondition(st, corev1.PodCondition{Type: t, Status: s, Reason: reason, LastTransitionTime: now})
	}
	cond(corev1.PodReadyToStartContainers, true, "")
	cond(corev1.PodInitialized, initialized, "ContainersNotInitialized")
	cond(corev1.ContainersReady, ready, "ContainersNotReady")
	cond(corev1.PodReady, ready, "ContainersNotReady")
}

// setCondition replaces the condition of c's type, keeping its transition
// time when the status is unchanged.
func setCondition(st *corev1.PodStatus, c corev1.PodCondition) {
	for i := range st.Conditions {
		if st.Conditions[i].Type == c.Type {
			if st.Conditions[i].Status == c.Status {
				c.LastTransitionTime = st.Conditions[i].LastTransitionTime
			}
			st.Conditions[i] = c
			return
		}
	}
	st.Conditions = append(st.Conditions, c)
}
