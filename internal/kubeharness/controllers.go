//go:build e2e

package kubeharness

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// controllers are the kube-controller-manager controllers the harness runs:
// what every cluster has and goray's tests lean on (owner-reference garbage
// collection, Jobs, namespace deletion, default ServiceAccounts, the
// EndpointSlices CoreDNS answers from), but not the node lifecycle
// controller (agent and kwok nodes send no heartbeats, so it would taint
// and evict every pod), the pod garbage collector (the agent does its part
// for deleted nodes), nor the volume, certificate and cloud controllers.
var controllers = []string{
	"garbage-collector-controller",
	"job-controller",
	"ttl-after-finished-controller",
	"namespace-controller",
	"serviceaccount-controller",
	"endpointslice-controller",
	"replicaset-controller",
	"deployment-controller",
}

// startControllerManager starts kube-controller-manager with the admin
// kubeconfig and waits for its /healthz.
func (cp *ControlPlane) startControllerManager(port int, probe *http.Client) error {
	args := []string{
		"--kubeconfig=" + cp.kubeconfig,
		"--authentication-kubeconfig=" + cp.kubeconfig,
		"--authorization-kubeconfig=" + cp.kubeconfig,
		"--controllers=" + strings.Join(controllers, ","),
		"--leader-elect=false",
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", port),
		"--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
		"--kube-api-qps=500", "--kube-api-burst=1000",
		"--concurrent-job-syncs=20",
	}
	kcm, err := cp.run("kube-controller-manager", append(args, cp.opts.ControllerManagerArgs...)...)
	if err != nil {
		return err
	}
	return cp.waitHTTP(kcm, probe, fmt.Sprintf("https://127.0.0.1:%d/healthz", port), "ok")
}

// startCoreDNS starts CoreDNS on the pod network's gateway address, port
// 53: cluster.local from the API server (Services, headless Services' pod
// hostnames, pods by IP), NXDOMAIN for every other name so that nothing is
// forwarded off the machine. It waits for the ready plugin, which answers
// once the kubernetes plugin has synced.
func (cp *ControlPlane) startCoreDNS(readyPort int) error {
	corefile := filepath.Join(cp.runDir, "Corefile")
	conf := fmt.Sprintf(`%[1]s:53 {
    bind %[2]s
    errors
    ready 127.0.0.1:%[3]d
    kubernetes %[1]s {
        kubeconfig %[4]s kubeharness
        pods verified
        ttl 1
    }
}
.:53 {
    bind %[2]s
    errors
    template ANY ANY {
        rcode NXDOMAIN
    }
}
`, clusterDomain, cp.net.gw, readyPort, cp.kubeconfig)
	if err := os.WriteFile(corefile, []byte(conf), 0o644); err != nil {
		return err
	}
	dns, err := cp.run("coredns", "-conf", corefile)
	if err != nil {
		return err
	}
	plain := &http.Client{Timeout: 2 * time.Second}
	return cp.waitHTTP(dns, plain, fmt.Sprintf("http://127.0.0.1:%d/ready", readyPort), "OK")
}
