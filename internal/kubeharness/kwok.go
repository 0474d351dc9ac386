//go:build e2e

package kubeharness

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"time"
)

// ensureKwok starts kwok on the first kwok node pool. kwok manages only
// nodes annotated kwok.x-k8s.io/node=fake and their pods: it moves those
// pods to Running with an IP from 10.244.0.0/16 (nothing runs) and
// finalizes their deletion. It sends no node heartbeats and makes no
// Leases; the controller manager runs without the node lifecycle
// controller, so nothing needs them.
func (cp *ControlPlane) ensureKwok() error {
	cp.kwokMu.Lock() // held until kwok is up: one kwok per control plane
	defer cp.kwokMu.Unlock()
	cp.mu.Lock()
	started := cp.kwok != nil
	cp.mu.Unlock()
	if started {
		return nil
	}
	if m := missingBinaries(cp.binDir, kwokNames); len(m) > 0 {
		return fmt.Errorf("kwok pool: %s missing in %s; build them with scripts/k8s-build.sh", strings.Join(m, ", "), cp.binDir)
	}
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	t := time.Now()
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	p, err := cp.run("kwok",
		"--kubeconfig="+cp.kubeconfig,
		"--config="+filepath.Join(cp.binDir, "kwok-stages.yaml"),
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector="+AnnotationKwok+"=fake",
		"--node-ip=127.0.0.1", "--cidr=10.244.0.0/16",
		"--server-address="+addr)
	if err != nil {
		return err
	}
	if err := cp.waitHTTP(p, &http.Client{Timeout: 2 * time.Second}, "http://"+addr+"/healthz", "ok"); err != nil {
		return err
	}
	cp.mu.Lock()
	cp.kwok = p
	cp.mu.Unlock()
	cp.tb.Logf("kubeharness: kwok %s up in %v", KwokVersion, time.Since(t).Round(time.Millisecond))
	return nil
}
