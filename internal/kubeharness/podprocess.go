//go:build e2e

package kubeharness

import (
	"context"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/types"
)

// PodProcess is the local process of one container of a pod that the node
// agent ran. It stays readable after the process exits and after the pod is
// deleted, until the control plane is torn down. Its methods are safe for
// concurrent use.
type PodProcess struct {
	Namespace, Pod, Container string
	UID                       types.UID
	// Node is the node the pod was bound to; IP is the pod's loopback IP.
	Node, IP string
	PID      int
	// Restarts is the container's restart count when this process started.
	Restarts int
	// LogPath holds the process's stdout and stderr.
	LogPath string

	p *process
}

// Exited is closed when the process has exited and been reaped.
func (pp *PodProcess) Exited() <-chan struct{} { return pp.p.done }

// ExitCode returns the exit code (128+signal if killed by one) and true
// once the process has exited.
func (pp *PodProcess) ExitCode() (int, bool) {
	if !pp.p.exited() {
		return 0, false
	}
	code, _ := pp.p.exitStatus()
	return code, true
}

// Wait blocks until the process exits or ctx is done.
func (pp *PodProcess) Wait(ctx context.Context) (int, error) {
	select {
	case <-pp.p.done:
		code, _ := pp.p.exitStatus()
		return code, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// PodProcess returns the current (latest) process of a container of the
// most recent pod named namespace/pod that the node agent ran. container ""
// means the pod's first container.
func (cp *ControlPlane) PodProcess(namespace, pod, container string) (*PodProcess, error) {
	r, err := cp.agent.run(namespace, pod)
	if err != nil {
		return nil, err
	}
	if container == "" && len(r.pod.Spec.Containers) > 0 {
		container = r.pod.Spec.Containers[0].Name
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	pp := r.procs[container]
	if pp == nil {
		return nil, fmt.Errorf("pod %s/%s: container %q has not started", namespace, pod, container)
	}
	return pp, nil
}

// PodLogs returns the combined stdout and stderr of the current (or last)
// process of a container, as `kubectl logs` would; container "" means the
// first container. The previous run of a restarted container is in
// <container>.previous.log beside LogPath.
func (cp *ControlPlane) PodLogs(namespace, pod, container string) (string, error) {
	pp, err := cp.PodProcess(namespace, pod, container)
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(pp.LogPath)
	if err != nil {
		return "", fmt.Errorf("logs of pod %s/%s container %s: %w", namespace, pod, pp.Container, err)
	}
	return string(b), nil
}
