package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/worker"
)

// echoRegistry serves the task "echo", which returns its input prefixed
// with the node it ran on, and "env", which returns the worker pod's
// TPU_WORKER_ID as the fake kubelet gave it.
type echoRegistry struct{ env map[string]string }

var echoEntries = []worker.Entry{{Kind: worker.KindTask, Name: "echo", Signature: "func(string) string"}}

func (r echoRegistry) Entries() []worker.Entry { return echoEntries }
func (r echoRegistry) Executor(codec string) (backend.Executor, error) {
	return echoExec(r), nil
}

type echoExec struct{ env map[string]string }

func (echoExec) HasTask(name string) bool           { return name == "echo" }
func (echoExec) HasActorMethod(string, string) bool { return false }
func (echoExec) WorkerManifest() worker.Manifest {
	return worker.Manifest{Codec: "raw", Entries: echoEntries}
}
func (x echoExec) NewActor(context.Context, string, backend.Value, *backend.RuntimeInfo) (backend.ActorInstance, error) {
	return nil, errors.New("no actors")
}
func (x echoExec) RunTask(ctx context.Context, _ string, arg backend.Value, info *backend.RuntimeInfo) (backend.Value, error) {
	if key, ok := strings.CutPrefix(string(arg.Data), "hold:"); ok {
		if err := echoHolds.hold(ctx, key); err != nil {
			return backend.Value{}, err
		}
	}
	return backend.Value{Data: []byte(info.Node + ":" + x.env["TPU_WORKER_ID"] + ":" + string(arg.Data))}, nil
}

// echoHolds holds an echo task of the data "hold:<key>" in its worker
// until the test lets key go (echoHold).
var echoHolds = &holds{m: map[string]*echoHold{}}

type holds struct {
	mu   sync.Mutex
	m    map[string]*echoHold
	next int
}

// add returns a new key and its hold (a key of its own per call, so that
// test runs of -count N do not share one).
func (h *holds) add() (string, *echoHold) {
	h.mu.Lock()
	h.next++
	key := strconv.Itoa(h.next)
	h.mu.Unlock()
	return key, h.get(key)
}

// echoHold is one key of echoHolds: started is closed when a task of it
// runs in a worker, and the task returns once release is closed.
type echoHold struct {
	started, release chan struct{}
	once             sync.Once
}

// get returns key's hold, made at first use.
func (h *holds) get(key string) *echoHold {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.m[key]
	if e == nil {
		e = &echoHold{started: make(chan struct{}), release: make(chan struct{})}
		h.m[key] = e
	}
	return e
}

func (h *holds) hold(ctx context.Context, key string) error {
	e := h.get(key)
	e.once.Do(func() { close(e.started) })
	select {
	case <-e.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// fakeKubelet runs the pods created in a fake clientset: each gets its own
// loopback IP and a real worker server listening there, serving
// echoRegistry with the token from the pod's Secret. Pods whose image is
// "bad" wait with ErrImagePull instead.
type fakeKubelet struct {
	client *fake.Clientset
	ns     string
	mu     sync.Mutex
	next   int
	port   int
	wg     sync.WaitGroup
	stops  map[string]context.CancelFunc
	cancel context.CancelFunc
}

func startKubelet(t *testing.T, client *fake.Clientset, ns string) *fakeKubelet {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	k := &fakeKubelet{client: client, ns: ns, next: 10, port: port, stops: map[string]context.CancelFunc{}, cancel: cancel}
	w, err := client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	k.wg.Go(func() {
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev := <-w.ResultChan():
				p, ok := ev.Object.(*corev1.Pod)
				if !ok {
					continue
				}
				switch ev.Type {
				case watch.Added:
					k.run(ctx, t, p)
				case watch.Deleted:
					k.mu.Lock()
					if stop := k.stops[p.Name]; stop != nil {
						stop()
					}
					k.mu.Unlock()
				}
			}
		}
	})
	t.Cleanup(k.stop)
	return k
}

func (k *fakeKubelet) stop() {
	k.cancel()
	k.wg.Wait()
}

func (k *fakeKubelet) run(ctx context.Context, t *testing.T, p *corev1.Pod) {
	pods := k.client.CoreV1().Pods(k.ns)
	if p.Spec.Containers[0].Image == "unschedulable" || len(p.Spec.SchedulingGates) > 0 {
		return // stays Pending, bound to no node, as a pod kube-scheduler cannot place
	}
	if p.Spec.Containers[0].Image == "bad" {
		p.Status.Phase = corev1.PodPending
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "worker", State: corev1.ContainerState{
			Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: "no such image"}}}}
		_, _ = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return
	}
	env := map[string]string{}
	for _, e := range p.Spec.Containers[0].Env {
		env[e.Name] = e.Value
		if ref := e.ValueFrom; ref != nil && ref.SecretKeyRef != nil {
			s, err := k.client.CoreV1().Secrets(k.ns).Get(ctx, ref.SecretKeyRef.Name, metav1.GetOptions{})
			if err != nil {
				t.Errorf("pod %s: secret: %v", p.Name, err)
				return
			}
			env[e.Name] = string(s.Data[ref.SecretKeyRef.Key])
		}
	}
	k.mu.Lock()
	ip := fmt.Sprintf("127.0.0.%d", k.next)
	k.next++
	k.mu.Unlock()
	ln, err := net.Listen("tcp", fmt.Sprintf("%s:%d", ip, k.port))
	if err != nil {
		t.Errorf("pod %s: %v", p.Name, err)
		return
	}
	// The worker serves mutual TLS with the credentials the pod's env
	// takes from the Secret, as ray.Main does in a real pod.
	tlsConfig, err := worker.Credentials{CA: []byte(env[worker.EnvTLSCA]), Cert: []byte(env[worker.EnvTLSCert]), Key: []byte(env[worker.EnvTLSKey])}.ServerConfig()
	if err != nil {
		t.Errorf("pod %s: %v", p.Name, err)
		ln.Close()
		return
	}
	// A driver's handshake env joins the pod's, as ServeLaunched sets it in
	// the process env (before any call on the connection).
	srv, err := worker.NewServer(echoRegistry{env: env}, &worker.ServerOptions{Token: env[worker.EnvToken], TLS: tlsConfig,
		OnEnv: func(e map[string]string) error { maps.Copy(env, e); return nil }})
	if err != nil {
		t.Errorf("pod %s: %v", p.Name, err)
		ln.Close()
		return
	}
	sctx, stop := context.WithCancel(ctx)
	k.mu.Lock()
	k.stops[p.Name] = stop
	k.mu.Unlock()
	k.wg.Go(func() { _ = srv.Serve(sctx, ln) })
	p.Status.Phase, p.Status.PodIP = corev1.PodRunning, ip
	if _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil && !strings.Contains(err.Error(), "not found") {
		t.Errorf("pod %s status: %v", p.Name, err)
	}
}
