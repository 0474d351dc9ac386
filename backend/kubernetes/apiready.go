package kubernetes

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"

	"github.com/goray-dev/goray/backend"
)

// notReadyIsUnavailable returns err as Unavailable when it is a Forbidden
// answer of an API server that does not say it is ready: an API server
// that has just started (after an outage, such as a control-plane
// upgrade) answers requests before it has loaded its RBAC rules, and
// forbids them meanwhile, /readyz too (which the bootstrap ClusterRole
// system:public-info-viewer otherwise lets everyone read). A Forbidden
// answer of an API server whose /readyz says "ok" is returned as it is
// (FailedPrecondition: the driver lacks a permission).
func notReadyIsUnavailable(ctx context.Context, client kubernetes.Interface, err error) error {
	if err == nil || !apierrors.IsForbidden(err) || client == nil {
		return err
	}
	d := client.Discovery()
	if d == nil {
		return err
	}
	rc := d.RESTClient()
	if rc == nil {
		return err
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	body, rerr := rc.Get().AbsPath("/readyz").DoRaw(cctx)
	said := strings.TrimSpace(string(body))
	if rerr == nil && said == "ok" {
		return err
	}
	if len(said) > 200 {
		said = said[:200] + "..."
	}
	return backend.Wrap(backend.Unavailable, "", fmt.Errorf("%w (the API server is not ready, so it may not have loaded its authorization rules yet: /readyz answered %q, %v)", err, said, rerr))
}
