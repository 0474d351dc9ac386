package kubernetes

import (
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"
	corev1 "k8s.io/api/core/v1"

	"github.com/goray-dev/goray/backend"
)

func TestConfigValidate(t *testing.T) {
	ok := func(f func(*Config)) Config {
		c := testConfig()
		f(&c)
		return c
	}
	tests := []struct {
		name string
		cfg  Config
		want []string // substrings of the error; none: valid
	}{
		{name: "minimal", cfg: testConfig()},
		{name: "everything", cfg: ok(func(c *Config) {
			c.Namespace, c.Worker.ServiceAccount, c.Worker.CPU, c.Worker.Memory = "ml", "goray-worker", "500m", "2Gi"
			c.CPUPool = CPUPool{Min: 1, Max: 4, NodeSelector: map[string]string{"pool": "cpu"}}
			c.Pod = PodOverrides{PriorityClassName: "high", Labels: map[string]string{"team": "a"},
				Annotations: map[string]string{"example.com/x": "any value"},
				Tolerations: []corev1.Toleration{{Key: "google.com/tpu", Operator: corev1.TolerationOpExists}}}
			c.Lease = LeaseConfig{Duration: 5 * time.Second, RenewEvery: time.Second}
		})},
		{name: "no image", cfg: ok(func(c *Config) { c.Worker.Image = "" }), want: []string{"Worker.Image is empty"}},
		{name: "several at once", cfg: ok(func(c *Config) {
			c.Namespace, c.Worker.Port, c.Worker.CPU = "Bad_NS", 70000, "lots"
		}), want: []string{`Namespace "Bad_NS"`, "Worker.Port 70000: want 1..65535", `Worker.CPU "lots"`}},
		{name: "pool bounds", cfg: ok(func(c *Config) { c.CPUPool = CPUPool{Min: 5, Max: 2} }), want: []string{"CPUPool.Min 5, Max 2: want 0 <= Min <= Max"}},
		{name: "own label", cfg: ok(func(c *Config) { c.Pod.Labels = map[string]string{LabelCluster: "x"} }), want: []string{"keys under goray.dev/ are the backend's own"}},
		{name: "bad label value", cfg: ok(func(c *Config) { c.Pod.Labels = map[string]string{"a": "has space"} }), want: []string{`Pod.Labels["a"] = "has space"`}},
		{name: "toleration", cfg: ok(func(c *Config) { c.Pod.Tolerations = []corev1.Toleration{{Operator: "Maybe"}} }), want: []string{`Pod.Tolerations[0].Operator "Maybe": want Equal or Exists`}},
		{name: "lease", cfg: ok(func(c *Config) { c.Lease = LeaseConfig{Duration: 2 * time.Second, RenewEvery: 3 * time.Second} }), want: []string{"Lease.RenewEvery 3s: want more than 0 and less than Lease.Duration 2s"}},
		{name: "short lease", cfg: ok(func(c *Config) { c.Lease.Duration = time.Millisecond }), want: []string{"Lease.Duration 1ms: want at least 1s"}},
		{name: "cert validity", cfg: ok(func(c *Config) { c.Worker.CertValidity = time.Second }), want: []string{"Worker.CertValidity 1s: want at least 1m (0 means 24h0m0s)"}},
		{name: "host idle", cfg: ok(func(c *Config) { c.Worker.HostIdle = -time.Second }), want: []string{"Worker.HostIdle -1s: want >= 0"}},
		{name: "pool idle timeout", cfg: ok(func(c *Config) { c.CPUPool.IdleTimeout = -time.Second }), want: []string{"CPUPool.IdleTimeout -1s: want >= 0 (0 means 1m0s)"}},
		{name: "kueue", cfg: ok(func(c *Config) { c.Kueue = KueueConfig{LocalQueue: "team", PriorityClass: "low"} })},
		{name: "kueue names", cfg: ok(func(c *Config) { c.Kueue = KueueConfig{LocalQueue: "Team A", PriorityClass: "x"} }), want: []string{`Kueue.LocalQueue "Team A"`}},
		{name: "kueue priority alone", cfg: ok(func(c *Config) { c.Kueue.PriorityClass = "low" }), want: []string{`Kueue.PriorityClass "low" without Kueue.LocalQueue`}},
		{name: "kueue with provisioning", cfg: ok(func(c *Config) {
			c.Kueue.LocalQueue, c.Provision.Mode = "team", ProvisionRequest
		})},
		{name: "kueue with placeholders", cfg: ok(func(c *Config) {
			c.Kueue.LocalQueue, c.Provision.Mode, c.Provision.Placeholders = "team", ProvisionPods, true
		}), want: []string{`Kueue.LocalQueue "team" with Provision.Placeholders`}},
		{name: "log level", cfg: ok(func(c *Config) { c.Worker.LogLevel = "loud" }), want: []string{`Worker.LogLevel "loud": want debug, info, warn, error or off`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			err := tt.cfg.Validate()
			if len(tt.want) == 0 {
				is.NoErr(err)
				return
			}
			is.Equal(backend.CodeOf(err), backend.InvalidArgument)
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	is := is.New(t)
	c := Config{}.withDefaults()
	is.Equal(c.Worker.Port, int32(DefaultWorkerPort))
	is.Equal(c.Lease.Duration, DefaultLeaseDuration)
	is.Equal(c.Lease.RenewEvery, DefaultLeaseDuration/3)
	is.Equal(c.CPUPool.Max, DefaultCPUPoolMax)
	is.True(c.Identity != "")
	is.True(c.Identity != Config{}.withDefaults().Identity) // unique per handle
}

func TestDNSName(t *testing.T) {
	tests := []struct{ in, want string }{
		{"goray-slice-Pool_A", "goray-slice-pool-a"},
		{"x-" + strings.Repeat("a", 80), ""},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			is := is.New(t)
			got := dnsName(tt.in)
			is.True(len(got) <= 63)
			if tt.want != "" {
				is.Equal(got, tt.want)
			}
			is.True(got != dnsName(tt.in+"b") || len(tt.in) < 63) // long names stay unique
		})
	}
}
