//go:build e2e

package kubeharness

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// Network says how pods are networked.
type Network int

const (
	// NetworkLoopback (the default): pods share the host's network
	// namespace; each gets its own 127.B.x.y to bind, but nothing stops a
	// process from binding or dialling any other address, and there is no
	// cluster DNS.
	NetworkLoopback Network = iota
	// NetworkIsolated: each pod runs in a network namespace of its own,
	// attached to a bridge the harness creates, with an address of a
	// 10.B.0.0/16 only this control plane uses. 127.0.0.1 inside a pod is
	// that pod alone; pods reach each other by pod IP or by cluster DNS
	// name (CoreDNS, answering cluster.local from the API server, at the
	// bridge's address 10.B.0.1, which is also where pods reach the test
	// process: see ControlPlane.HostIP). The test process reaches pods by
	// their IPs through the bridge. There is no route off the machine and
	// no kube-proxy: a ClusterIP Service's name resolves but its virtual
	// IP leads nowhere; use headless Services and pod names, as goray does.
	//
	// It needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2's `ip`;
	// where either is missing, Start skips the test with a message naming
	// what is missing (see CheckIsolatedNetwork).
	NetworkIsolated
)

// clusterDomain is the DNS domain CoreDNS answers, as kubelet's default
// --cluster-domain.
const clusterDomain = "cluster.local"

// netPrefix starts the names of everything the harness creates in the
// kernel's network state: namespaces "kh<pid36>-<n36>" (under /run/netns
// and /etc/netns), bridges "kh<pid36>-b<n36>" and host-side veths
// "kh<pid36>-v<n36>", where pid36 is the test binary's PID in base 36; so a
// later Start can find what a dead test binary left and remove it.
const netPrefix = "kh"

// netSeq numbers bridges and pod namespaces within this test binary.
var netSeq atomic.Uint64

// CheckIsolatedNetwork reports why NetworkIsolated cannot run here, or nil:
// it needs root and `ip`, and tries to create and delete a namespace.
func CheckIsolatedNetwork() error {
	checkNetOnce.Do(func() {
		if os.Geteuid() != 0 {
			checkNetErr = errors.New("network namespaces need root (CAP_NET_ADMIN, CAP_SYS_ADMIN); running as uid " + strconv.Itoa(os.Geteuid()))
			return
		}
		ipPath, err := exec.LookPath("ip")
		if err != nil {
			checkNetErr = fmt.Errorf("network namespaces need iproute2's ip command: %w", err)
			return
		}
		ipBin = ipPath
		name := nsName()
		if err := ipCmd("netns", "add", name); err != nil {
			checkNetErr = fmt.Errorf("cannot create a network namespace: %w", err)
			return
		}
		if err := ipCmd("netns", "del", name); err != nil {
			checkNetErr = fmt.Errorf("cannot delete network namespace %s: %w", name, err)
		}
	})
	return checkNetErr
}

var (
	checkNetOnce sync.Once
	checkNetErr  error
	ipBin        string
)

func pid36() string { return strconv.FormatInt(int64(os.Getpid()), 36) }

func nsName() string {
	return netPrefix + pid36() + "-" + strconv.FormatUint(netSeq.Add(1), 36)
}

// ipCmd runs `ip args...` and returns its output in the error on failure.
func ipCmd(args ...string) error {
	return ipBatch(nil, args...)
}

// ipBatch runs `ip args...` with stdin (for -batch -).
func ipBatch(stdin []byte, args ...string) error {
	cmd := exec.Command(ipBin, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// podNetwork is one control plane's isolated pod network: a bridge with
// the gateway address, an address pool and the namespaces of live pods.
type podNetwork struct {
	bridge string
	prefix netip.Prefix // 10.B.0.0/16
	gw     netip.Addr   // 10.B.0.1: the bridge, CoreDNS, the test process

	mu   sync.Mutex
	next int               // last host number handed out
	pods map[string]string // namespace name → pod IP, while it exists
}

// netLockPath serializes the choice of subnets across test binaries.
const netLockPath = "/run/kubeharness-net.lock"

// newPodNetwork picks a 10.B.0.0/16 that no interface of the host uses and
// creates the bridge holding its first address, under a machine-wide lock
// so that two test binaries never pick the same one.
func newPodNetwork() (*podNetwork, error) {
	if err := CheckIsolatedNetwork(); err != nil {
		return nil, err
	}
	reapStaleNetworks()
	// The mount point of service-account tokens must exist on the host;
	// what is mounted there stays inside each pod's mount namespace.
	if err := os.MkdirAll(saMountPath, 0o755); err != nil {
		return nil, fmt.Errorf("pod network: service-account mount point: %w", err)
	}
	lock, err := os.OpenFile(netLockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("pod network lock: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return nil, fmt.Errorf("pod network lock: %w", err)
	}
	defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }()
	used := map[byte]bool{}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip4 := n.IP.To4(); ip4 != nil && ip4[0] == 10 {
				used[ip4[1]] = true
			}
		}
	}
	// B stops below 244: kwok gives its pods addresses of 10.244.0.0/16.
	for b := 100; b < 240; b++ {
		if used[byte(b)] {
			continue
		}
		pn := &podNetwork{
			bridge: netPrefix + pid36() + "-b" + strconv.FormatUint(netSeq.Add(1), 36),
			prefix: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(b), 0, 0}), 16),
			gw:     netip.AddrFrom4([4]byte{10, byte(b), 0, 1}),
			next:   1,
			pods:   map[string]string{},
		}
		script := fmt.Sprintf("link add %[1]s type bridge\naddr add %[2]s/16 dev %[1]s\nlink set %[1]s up\n", pn.bridge, pn.gw)
		if err := ipBatch([]byte(script), "-batch", "-"); err != nil {
			_ = ipCmd("link", "del", pn.bridge)
			return nil, fmt.Errorf("pod network bridge: %w", err)
		}
		return pn, nil
	}
	return nil, errors.New("pod network: every 10.B.0.0/16 with B in [100, 240) is in use on this host")
}

// add creates a pod's namespace: a veth pair between it and the bridge,
// its address and a default route through the gateway, lo up, and the
// /etc/netns/<name>/resolv.conf and hosts that `ip netns exec` puts in
// place of /etc's for the pod's processes. It returns the namespace's name
// and the pod's IP.
func (pn *podNetwork) add(namespace, hostname, fqdn string, clusterDNS bool) (string, string, error) {
	pn.mu.Lock()
	pn.next++
	n := pn.next
	pn.mu.Unlock()
	if n >= 254*256 {
		return "", "", errors.New("pod network: address pool exhausted")
	}
	b := pn.prefix.Addr().As4()
	ip := netip.AddrFrom4([4]byte{b[0], b[1], byte(n / 254), byte(n%254 + 1)})
	name := nsName()
	veth := strings.Replace(name, "-", "-v", 1)
	pn.mu.Lock()
	pn.pods[name] = ip.String()
	pn.mu.Unlock()
	host := fmt.Sprintf("netns add %[1]s\nlink add %[2]s type veth peer name eth0 netns %[1]s\nlink set %[2]s master %[3]s up\n",
		name, veth, pn.bridge)
	if err := ipBatch([]byte(host), "-batch", "-"); err != nil {
		pn.remove(name)
		return "", "", err
	}
	inside := fmt.Sprintf("link set lo up\naddr add %s/16 dev eth0\nlink set eth0 up\nroute add default via %s\n", ip, pn.gw)
	if err := ipBatch([]byte(inside), "-n", name, "-batch", "-"); err != nil {
		pn.remove(name)
		return "", "", err
	}
	etc := filepath.Join("/etc/netns", name)
	if err := os.MkdirAll(etc, 0o755); err != nil {
		pn.remove(name)
		return "", "", err
	}
	hosts := "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" + ip.String() + "\t"
	if fqdn != "" {
		hosts += fqdn + "\t"
	}
	hosts += hostname + "\n"
	files := map[string]string{"hosts": hosts}
	if clusterDNS {
		files["resolv.conf"] = fmt.Sprintf("search %[1]s.svc.%[2]s svc.%[2]s %[2]s\nnameserver %[3]s\noptions ndots:5\n",
			namespace, clusterDomain, pn.gw)
	}
	for f, body := range files {
		if err := os.WriteFile(filepath.Join(etc, f), []byte(body), 0o644); err != nil {
			pn.remove(name)
			return "", "", err
		}
	}
	return name, ip.String(), nil
}

// remove deletes a pod's namespace (its veth pair goes with it) and its
// /etc/netns folder. It is idempotent.
func (pn *podNetwork) remove(name string) {
	pn.mu.Lock()
	_, ok := pn.pods[name]
	delete(pn.pods, name)
	pn.mu.Unlock()
	if !ok {
		return
	}
	removeNamespace(name)
}

func removeNamespace(name string) {
	_ = ipCmd("netns", "del", name)
	_ = os.RemoveAll(filepath.Join("/etc/netns", name))
}

// close removes every namespace left and the bridge.
func (pn *podNetwork) close() {
	for _, n := range pn.namespaces() {
		pn.remove(n)
	}
	_ = ipCmd("link", "del", pn.bridge)
}

// namespaces returns the names of the pod namespaces that exist.
func (pn *podNetwork) namespaces() []string {
	pn.mu.Lock()
	defer pn.mu.Unlock()
	names := make([]string, 0, len(pn.pods))
	for n := range pn.pods {
		names = append(names, n)
	}
	return names
}

// saMountPath is where a pod's service-account token, CA and namespace
// are, as kubelet mounts them and client-go's in-cluster config reads them.
const saMountPath = "/var/run/secrets/kubernetes.io/serviceaccount"

// execArgv wraps a pod process's argv so that it runs in the namespace,
// with the namespace's /etc/netns files bind-mounted over /etc's and, when
// saDir is set, saDir bind-mounted at saMountPath. `ip netns exec` runs
// the command in a mount namespace of its own whose mounts do not reach
// the host, and execs in place (as does the shell), so the PID, process
// group and parent-death signal the harness set stay the pod's.
func execArgv(netns, saDir string, argv []string) []string {
	out := []string{ipBin, "netns", "exec", netns}
	if saDir != "" {
		out = append(out, "/bin/sh", "-c", `mount --bind "$1" `+saMountPath+` && shift && exec "$@"`, "sh", saDir)
	}
	return append(out, argv...)
}

// reapStaleNetworks removes the namespaces and bridges of test binaries
// that died without cleanup (their processes died with them; the kernel
// objects and /etc/netns folders stay).
func reapStaleNetworks() {
	dead := func(name string) bool {
		rest, ok := strings.CutPrefix(name, netPrefix)
		if !ok {
			return false
		}
		p, _, ok := strings.Cut(rest, "-")
		if !ok {
			return false
		}
		pid, err := strconv.ParseInt(p, 36, 64)
		if err != nil || pid <= 0 || int(pid) == os.Getpid() {
			return false
		}
		return errors.Is(syscall.Kill(int(pid), 0), syscall.ESRCH)
	}
	if ents, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range ents {
			if dead(e.Name()) {
				removeNamespace(e.Name())
			}
		}
	}
	if ents, err := os.ReadDir("/etc/netns"); err == nil {
		for _, e := range ents {
			if dead(e.Name()) {
				removeNamespace(e.Name())
			}
		}
	}
	if ifs, err := net.Interfaces(); err == nil {
		for _, i := range ifs {
			if _, n, _ := strings.Cut(i.Name, "-"); dead(i.Name) && strings.HasPrefix(n, "b") {
				_ = ipCmd("link", "del", i.Name)
			}
		}
	}
}
