package kubernetes

import (
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
)

// TestDriverHost: worker pods reach the driver at Config.DriverHost, else
// at the driver pod's IP; a driver in a pod without $POD_IP or outside
// the cluster is told what to set, instead of its loopback address that
// no pod can reach (train's rendezvous listened on 127.0.0.1).
func TestDriverHost(t *testing.T) {
	cases := []struct {
		name, configured, podIP, serviceHost string
		want, wantErr                        string
	}{
		{"configured", "10.0.0.9", "10.1.2.3", "10.96.0.1", "10.0.0.9", ""},
		{"in a pod", "", "10.1.2.3", "10.96.0.1", "10.1.2.3", ""},
		{"in a pod without POD_IP", "", "", "10.96.0.1", "", "pass the pod's IP with the downward API"},
		{"outside the cluster", "", "", "", "", "set kubernetes.Config.DriverHost (or train's RunConfig.Rendezvous)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			t.Setenv("POD_IP", tc.podIP)
			t.Setenv("KUBERNETES_SERVICE_HOST", tc.serviceHost)
			b := &Backend{driverHost: tc.configured}
			got, err := b.DriverHost(t.Context())
			if tc.wantErr != "" {
				is.Equal(backend.CodeOf(err), backend.FailedPrecondition)
				is.True(err != nil && strings.Contains(err.Error(), tc.wantErr))
				return
			}
			is.NoErr(err)
			is.Equal(got, tc.want)
		})
	}
}
