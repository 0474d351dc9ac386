//go:build e2e

package kubeharness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// stopKind says why a pod's processes stop; a later, more severe request
// overrides an earlier one.
type stopKind int

const (
	stopNone        stopKind = iota
	stopTerminating          // graceful delete: SIGTERM, grace, SIGKILL, final status, delete
	stopNodeLost             // node deleted: SIGKILL, Failed status, delete
	stopPodGone              // pod object gone: SIGKILL
	stopTeardown             // harness teardown: SIGKILL
)

// Restart backoff of crashed containers: 1 s doubling to 10 s (the kubelet
// uses 10 s to 5 min; tests should not wait that long).
const (
	restartBackoffBase = time.Second
	restartBackoffMax  = 10 * time.Second
)

// podRun is one pod on an agent node: its loopback IP, folder, container
// processes and status. loop owns the container state; the exported view
// (procs) is guarded by mu.
type podRun struct {
	a      *nodeAgent
	pod    *corev1.Pod // as first seen; the spec is what runs
	uid    types.UID
	node   string
	ip     string
	hostIP string
	dir    string
	netns  string // NetworkIsolated: the pod's network namespace, once made
	netErr error  // NetworkIsolated: why the namespace (or token) could not be made
	saDir  string // NetworkIsolated: the service-account files mounted at saMountPath

	stopMu   sync.Mutex
	stopKind stopKind
	grace    time.Duration
	stopCh   chan struct{} // poked (cap 1) on each stop request
	done     chan struct{}

	mu    sync.Mutex
	procs map[string]*PodProcess // current process of each container

	// Owned by loop.
	last      *corev1.Pod // last pod object read or written, for UpdateStatus
	startTime metav1.Time
	init      []*ctrState
	main      []*ctrState
	nextInit  int
	failed    bool // an init container failed with restartPolicy Never
	terminal  bool // phase Succeeded or Failed reached
	exits     chan *ctrState
}

// ctrState is one container's state inside loop.
type ctrState struct {
	spec        corev1.Container
	isInit      bool
	sidecar     bool // init container with restartPolicy Always
	binary      string
	imageErr    error
	status      corev1.ContainerStatus
	proc        *process
	restartAt   time.Time // a restart is due then; zero if none
	initDone    bool
	everStarted bool
}

func newPodRun(a *nodeAgent, pod *corev1.Pod, hostIP string) *podRun {
	r := &podRun{
		a:      a,
		pod:    pod,
		uid:    pod.UID,
		node:   pod.Spec.NodeName,
		hostIP: hostIP,
		dir:    filepath.Join(a.cfg.runDir, "pods", fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID)),
		stopCh: make(chan struct{}, 1),
		done:   make(chan struct{}),
		procs:  make(map[string]*PodProcess),
		last:   pod,
	}
	switch {
	case pod.Spec.HostNetwork:
		r.ip = hostIP
	case a.cfg.net != nil:
		// loop makes the namespace and sets the IP before anything runs.
	default:
		r.ip = a.cfg.ips.next().String()
	}
	for _, c := range pod.Spec.InitContainers {
		sidecar := c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
		r.init = append(r.init, r.newCtr(c, true, sidecar))
	}
	for _, c := range pod.Spec.Containers {
		r.main = append(r.main, r.newCtr(c, false, false))
	}
	r.exits = make(chan *ctrState, len(r.init)+len(r.main))
	return r
}

func (r *podRun) newCtr(c corev1.Container, isInit, sidecar bool) *ctrState {
	bin, err := r.a.cfg.images.resolve(c.Image)
	cs := &ctrState{spec: c, isInit: isInit, sidecar: sidecar, binary: bin, imageErr: err}
	cs.status = corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: "kubeharness://" + bin}
	if err != nil {
		cs.status.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: err.Error()}
	} else {
		cs.status.State.Waiting = &corev1.ContainerStateWaiting{Reason: "PodInitializing"}
	}
	return cs
}

func (r *podRun) requestStop(kind stopKind, grace time.Duration) {
	r.stopMu.Lock()
	if kind > r.stopKind {
		r.stopKind, r.grace = kind, grace
	}
	r.stopMu.Unlock()
	select {
	case r.stopCh <- struct{}{}:
	default:
	}
}

func (r *podRun) stopRequest() (stopKind, time.Duration) {
	r.stopMu.Lock()
	defer r.stopMu.Unlock()
	return r.stopKind, r.grace
}

func (r *podRun) loop() {
	defer close(r.done)
	r.startTime = metav1.Now()
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		r.a.cfg.logf("kubeharness: node agent: pod %s/%s: %v", r.pod.Namespace, r.pod.Name, err)
	}
	if n := r.a.cfg.net; n != nil && !r.pod.Spec.HostNetwork {
		r.makeNetwork(n)
		defer func() { n.remove(r.netns) }()
		if r.netErr == nil {
			r.saDir, r.netErr = r.serviceAccountFiles()
		}
	}
	r.advance()
	r.publish()
	for {
		var (
			due   <-chan time.Time
			timer *time.Timer
		)
		if at := r.nextRestart(); !at.IsZero() {
			timer = time.NewTimer(time.Until(at))
			due = timer.C
		}
		select {
		case c := <-r.exits:
			r.onExit(c, !r.terminal)
		case <-due:
		case <-r.stopCh:
			if timer != nil {
				timer.Stop()
			}
			r.shutdown()
			return
		}
		if timer != nil {
			timer.Stop()
		}
		r.advance()
		r.publish()
	}
}

func (r *podRun) restartPolicy() corev1.RestartPolicy {
	if r.pod.Spec.RestartPolicy == "" {
		return corev1.RestartPolicyAlways
	}
	return r.pod.Spec.RestartPolicy
}

// advance starts what is due: the next init container, or (once init is
// done) every main container and sidecar that is neither running nor
// finished nor waiting out a restart backoff.
func (r *podRun) advance() {
	if r.terminal || r.failed {
		return
	}
	now := time.Now()
	for r.nextInit < len(r.init) {
		c := r.init[r.nextInit]
		r.maybeStart(c, now)
		if !c.sidecar && !c.initDone {
			return
		}
		r.nextInit++
	}
	for _, c := range r.init {
		if c.sidecar {
			r.maybeStart(c, now)
		}
	}
	for _, c := range r.main {
		r.maybeStart(c, now)
	}
	if ph := r.phase(); ph == corev1.PodSucceeded || ph == corev1.PodFailed {
		// Sidecars follow the main containers out once the pod is done.
		r.terminal = true
		for _, c := range r.init {
			if c.sidecar && c.proc != nil {
				c.proc.stop(2 * time.Second)
			}
		}
	}
}

func (r *podRun) maybeStart(c *ctrState, now time.Time) {
	if c.proc != nil || c.imageErr != nil || c.restartAt.After(now) || c.status.State.Terminated != nil {
		return
	}
	r.startCtr(c)
}

func (r *podRun) nextRestart() time.Time {
	var at time.Time
	for _, cs := range [][]*ctrState{r.init, r.main} {
		for _, c := range cs {
			if !c.restartAt.IsZero() && c.proc == nil && (at.IsZero() || c.restartAt.Before(at)) {
				at = c.restartAt
			}
		}
	}
	return at
}

func (r *podRun) startCtr(c *ctrState) {
	if c.everStarted {
		c.status.RestartCount++
	}
	c.everStarted = true
	c.restartAt = time.Time{}
	p, logPath, err := r.exec(c)
	if err != nil {
		now := metav1.Now()
		c.status.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 128, Reason: "StartError", Message: err.Error(), StartedAt: now, FinishedAt: now,
		}}
		r.afterExit(c, 128, !r.terminal)
		return
	}
	c.proc = p
	c.status.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}
	c.status.ContainerID = fmt.Sprintf("kubeharness://%d", p.pid)
	started := true
	c.status.Started = &started
	c.status.Ready = !c.isInit || c.sidecar
	r.mu.Lock()
	r.procs[c.spec.Name] = &PodProcess{
		Namespace: r.pod.Namespace, Pod: r.pod.Name, Container: c.spec.Name, UID: r.uid,
		Node: r.node, IP: r.ip, PID: p.pid, Restarts: int(c.status.RestartCount), LogPath: logPath, p: p,
	}
	r.mu.Unlock()
	go func() {
		select {
		case <-p.done:
			select {
			case r.exits <- c:
			case <-r.done:
			}
		case <-r.done:
		}
	}()
}

// exec starts one container's process: argv from the image table and the
// container's command and args, env from the spec plus downward values,
// stdout and stderr into <pod dir>/<container>.log.
func (r *podRun) exec(c *ctrState) (*process, string, error) {
	ctx, cancel := context.WithTimeout(r.a.ctx, 30*time.Second)
	defer cancel()
	env, err := r.env(ctx, c.spec)
	if err != nil {
		return nil, "", err
	}
	argv, err := c.argv(env)
	if err != nil {
		return nil, "", err
	}
	path := argv[0]
	if !strings.Contains(path, "/") {
		if path, err = exec.LookPath(path); err != nil {
			return nil, "", fmt.Errorf("container %q: %w", c.spec.Name, err)
		}
	}
	logPath := filepath.Join(r.dir, c.spec.Name+".log")
	if _, err := os.Stat(logPath); err == nil {
		_ = os.Rename(logPath, filepath.Join(r.dir, c.spec.Name+".previous.log"))
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, "", err
	}
	defer logf.Close()
	if r.netErr != nil {
		return nil, "", r.netErr
	}
	if r.netns != "" {
		argv = execArgv(r.netns, r.saDir, append([]string{path}, argv[1:]...))
		path = argv[0]
	}
	cmd := exec.Command(path, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Env = env.list()
	cmd.Dir = r.dir
	if wd := c.spec.WorkingDir; wd != "" {
		if st, err := os.Stat(wd); err == nil && st.IsDir() {
			cmd.Dir = wd
		}
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	p, err := startProcess(r.pod.Namespace+"/"+r.pod.Name+"/"+c.spec.Name, cmd)
	return p, logPath, err
}

// makeNetwork gives the pod its network namespace and IP (NetworkIsolated):
// the pod's hostname (spec.hostname or its name) and, with a subdomain,
// its DNS name in /etc/hosts as kubelet writes them; cluster DNS in
// resolv.conf unless dnsPolicy is Default or None (dnsConfig is not
// applied). A failure leaves every container to fail with StartError.
func (r *podRun) makeNetwork(n *podNetwork) {
	host := r.pod.Spec.Hostname
	if host == "" {
		host = r.pod.Name
	}
	fqdn := ""
	if sub := r.pod.Spec.Subdomain; sub != "" {
		fqdn = fmt.Sprintf("%s.%s.%s.svc.%s", host, sub, r.pod.Namespace, clusterDomain)
	}
	policy := r.pod.Spec.DNSPolicy
	clusterDNS := policy != corev1.DNSDefault && policy != corev1.DNSNone
	name, ip, err := n.add(r.pod.Namespace, host, fqdn, clusterDNS)
	if err != nil {
		r.netErr = fmt.Errorf("pod network: %w", err)
		r.a.cfg.logf("kubeharness: node agent: pod %s/%s: %v", r.pod.Namespace, r.pod.Name, r.netErr)
		return
	}
	r.netns, r.ip = name, ip
}

// serviceAccountFiles writes what kubelet mounts at saMountPath for a pod
// that does not opt out (automountServiceAccountToken: false): a token of
// its ServiceAccount ("default" if unnamed) from the TokenRequest API, the
// apiserver's CA and the namespace. The pod waits for a ServiceAccount
// that does not exist yet.
func (r *podRun) serviceAccountFiles() (string, error) {
	pod := r.pod
	if a := pod.Spec.AutomountServiceAccountToken; a != nil && !*a {
		return "", nil
	}
	sa := pod.Spec.ServiceAccountName
	// A token is bound to its pod, which the API server allows only for
	// the pod's own ServiceAccount; without ServiceAccount admission
	// (off, see Start) a pod naming none has none, so its token of
	// "default" is unbound.
	var bound *authnv1.BoundObjectReference
	if sa == "" {
		sa = "default"
	} else {
		bound = &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	exp := int64(24 * 3600)
	var tr *authnv1.TokenRequest
	var err error
	// As kubelet retries a volume it cannot mount yet, a ServiceAccount
	// that does not exist yet (the controller manager makes "default"
	// shortly after a namespace) keeps the pod waiting, until it is
	// stopped.
	for {
		ctx, cancel := context.WithTimeout(r.a.ctx, 30*time.Second)
		tr, err = r.a.client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, &authnv1.TokenRequest{
			Spec: authnv1.TokenRequestSpec{
				ExpirationSeconds: &exp,
				BoundObjectRef:    bound,
			},
		}, metav1.CreateOptions{})
		cancel()
		if err == nil || !apierrors.IsNotFound(err) {
			break
		}
		select {
		case <-r.stopCh:
			// Poke again for loop, which handles the stop; the channel may
			// hold a newer poke already.
			select {
			case r.stopCh <- struct{}{}:
			default:
			}
			return "", fmt.Errorf("service account %s/%s: %w", pod.Namespace, sa, err)
		case <-r.a.ctx.Done():
			return "", r.a.ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	if err != nil {
		return "", fmt.Errorf("service account %s/%s token for %s: %w", pod.Namespace, sa, saMountPath, err)
	}
	dir := filepath.Join(r.dir, "serviceaccount")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	for name, data := range map[string][]byte{
		"token": []byte(tr.Status.Token), "ca.crt": r.a.cfg.caPEM, "namespace": []byte(pod.Namespace),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return "", err
		}
	}
	return dir, nil
}

func (c *ctrState) argv(env *envList) ([]string, error) {
	var argv []string
	switch {
	case len(c.spec.Command) > 0:
		argv = append(append(argv, c.spec.Command...), c.spec.Args...)
	case c.binary != "":
		argv = append([]string{c.binary}, c.spec.Args...)
	case len(c.spec.Args) > 0:
		argv = append(argv, c.spec.Args...)
	default:
		return nil, fmt.Errorf("container %q: image %q has no entrypoint in the harness image table; set command", c.spec.Name, c.spec.Image)
	}
	for i, a := range argv {
		argv[i] = env.expand(a)
	}
	return argv, nil
}

// onExit records the exit of c's process and, if allowed, applies the
// restart policy.
func (r *podRun) onExit(c *ctrState, allowRestart bool) {
	if c.proc == nil {
		return
	}
	p := c.proc
	c.proc = nil
	code, sig := p.exitStatus()
	reason := "Completed"
	if code != 0 {
		reason = "Error"
	}
	var started metav1.Time
	if c.status.State.Running != nil {
		started = c.status.State.Running.StartedAt
	}
	c.status.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: int32(code), Signal: int32(sig), Reason: reason, StartedAt: started, FinishedAt: metav1.Now(),
		ContainerID: c.status.ContainerID,
	}}
	c.status.Ready = false
	f := false
	c.status.Started = &f
	r.afterExit(c, code, allowRestart)
}

// afterExit applies the restart policy to a container that exited: a
// restart turns its state to Waiting (CrashLoopBackOff) with the exit in
// lastState, as the kubelet shows it.
func (r *podRun) afterExit(c *ctrState, code int, allowRestart bool) {
	policy := r.restartPolicy()
	restart := false
	switch {
	case c.sidecar:
		restart = true
	case c.isInit:
		if code == 0 {
			c.initDone = true
			return
		}
		restart = policy != corev1.RestartPolicyNever
		r.failed = !restart
	default:
		restart = policy == corev1.RestartPolicyAlways || (policy == corev1.RestartPolicyOnFailure && code != 0)
	}
	if !restart || !allowRestart {
		return
	}
	backoff := min(restartBackoffBase<<min(c.status.RestartCount, 4), restartBackoffMax)
	c.restartAt = time.Now().Add(backoff)
	c.status.LastTerminationState = corev1.ContainerState{Terminated: c.status.State.Terminated}
	c.status.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
		Reason: "CrashLoopBackOff", Message: fmt.Sprintf("back-off %v restarting failed container %s", backoff, c.spec.Name),
	}}
}

// phase computes the pod phase as the kubelet does.
func (r *podRun) phase() corev1.PodPhase {
	if r.failed {
		return corev1.PodFailed
	}
	for _, c := range r.init {
		if !c.sidecar && !c.initDone {
			return corev1.PodPending
		}
	}
	everStarted, allDone, allZero := false, true, true
	for _, c := range r.main {
		everStarted = everStarted || c.everStarted
		if t := c.status.State.Terminated; t == nil {
			allDone = false
		} else if t.ExitCode != 0 {
			allZero = false
		}
	}
	switch {
	case allDone && allZero:
		return corev1.PodSucceeded
	case allDone:
		return corev1.PodFailed
	case everStarted:
		return corev1.PodRunning
	default:
		return corev1.PodPending
	}
}

// shutdown stops every process for the pending stop request, then writes
// the final status and deletes the pod where the request calls for it.
func (r *podRun) shutdown() {
	kind, grace := r.stopRequest()
	var running []*ctrState
	for _, c := range append(append([]*ctrState(nil), r.main...), r.init...) {
		if c.proc != nil {
			running = append(running, c)
		}
	}
	if kind == stopTerminating && grace > 0 && len(running) > 0 {
		for _, c := range running {
			c.proc.signal(syscall.SIGTERM)
		}
		t := time.NewTimer(grace)
	wait:
		for _, c := range running {
			for {
				select {
				case <-c.proc.done:
					continue wait
				case <-t.C:
					break wait
				case <-r.stopCh:
					if k, _ := r.stopRequest(); k != stopTerminating {
						kind = k
						break wait
					}
				}
			}
		}
		t.Stop()
	}
	for _, c := range running {
		c.proc.stop(0)
		r.onExit(c, false)
	}
	for _, cs := range [][]*ctrState{r.init, r.main} {
		for _, c := range cs {
			c.restartAt = time.Time{}
		}
	}
	ctx, cancel := context.WithTimeout(r.a.ctx, 30*time.Second)
	defer cancel()
	switch kind {
	case stopTerminating:
		r.publishCtx(ctx, nil)
		r.a.forceDelete(ctx, r.pod.Namespace, r.pod.Name, r.uid)
	case stopNodeLost:
		if !r.terminal { // a finished pod keeps its phase
			r.publishCtx(ctx, markNodeLost)
		}
		r.a.forceDelete(ctx, r.pod.Namespace, r.pod.Name, r.uid)
	}
}
