//go:build e2e

package kubeharness

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/matryer/is"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// These tests need no binaries; they run on the fast path.

func TestNodePoolResolve(t *testing.T) {
	cases := []struct {
		name        string
		pool        NodePool
		accelerator string
		hosts, cph  int
		machine     string
		err         string
	}{
		{name: "v6e 4x4", pool: NodePool{Generation: "v6e", Topology: "4x4"}, accelerator: "tpu-v6e-slice", hosts: 4, cph: 4, machine: "ct6e-standard-4t"},
		{name: "v6e label value", pool: NodePool{Generation: "tpu-v6e-slice", Topology: "2x4"}, accelerator: "tpu-v6e-slice", hosts: 1, cph: 8, machine: "ct6e-standard-8t"},
		{name: "v6e 2x4 on 4t VMs", pool: NodePool{Generation: "v6e", Topology: "2x4", ChipsPerHost: 4}, accelerator: "tpu-v6e-slice", hosts: 2, cph: 4, machine: "ct6e-standard-4t"},
		{name: "v5e 1x1", pool: NodePool{Generation: "v5e", Topology: "1x1"}, accelerator: "tpu-v5-lite-podslice", hosts: 1, cph: 1, machine: "ct5lp-hightpu-1t"},
		{name: "v5litepod alias", pool: NodePool{Generation: "v5litepod", Topology: "16x16"}, accelerator: "tpu-v5-lite-podslice", hosts: 64, cph: 4},
		{name: "v4 2x2x2", pool: NodePool{Generation: "v4", Topology: "2x2x2"}, accelerator: "tpu-v4-podslice", hosts: 2, cph: 4, machine: "ct4p-hightpu-4t"},
		{name: "v5p TPU-V5P", pool: NodePool{Generation: "TPU-V5P", Topology: "4x4x4"}, accelerator: "tpu-v5p-slice", hosts: 16, cph: 4},
		{name: "v7x tpu7x", pool: NodePool{Generation: "tpu7x", Topology: "2x2x1", Hosts: 1}, accelerator: "tpu7x", hosts: 1, cph: 4, machine: "tpu7x-standard-4t"},
		{name: "unknown generation", pool: NodePool{Generation: "v9", Topology: "4x4"}, err: `unknown TPU generation "v9"; valid: v4 (tpu-v4-podslice)`},
		{name: "3D topology for v6e", pool: NodePool{Generation: "v6e", Topology: "2x2x2"}, err: `want 2 positive dimensions like "4x4"`},
		{name: "bad chips per host", pool: NodePool{Generation: "v4", Topology: "2x2x2", ChipsPerHost: 8}, err: "valid: [4]"},
		{name: "hosts disagree", pool: NodePool{Generation: "v6e", Topology: "4x4", Hosts: 3}, err: "has 4 hosts, not 3"},
		{name: "chips not a multiple", pool: NodePool{Generation: "v6e", Topology: "1x1", ChipsPerHost: 4}, err: "not a multiple of 4"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			is := is.New(t)
			c.pool.Name = "pool"
			spec, err := c.pool.resolve()
			if c.err != "" {
				is.True(err != nil)
				is.True(strings.Contains(err.Error(), c.err)) // error names what is valid
				return
			}
			is.NoErr(err)
			is.Equal(spec.count, c.hosts)
			is.Equal(spec.labels[LabelTPUAccelerator], c.accelerator)
			is.Equal(spec.labels[LabelNodePool], "pool")
			is.Equal(spec.labels[LabelTPUTopology], strings.ToLower(c.pool.Topology))
			tpus := spec.capacity[ResourceTPU]
			is.Equal(tpus.Value(), int64(c.cph))
			is.Equal(spec.labels[LabelAcceleratorCount], resource.NewQuantity(int64(c.cph), resource.DecimalSI).String())
			if c.machine != "" {
				is.Equal(spec.labels[LabelInstanceType], c.machine)
			}
		})
	}
}

func TestImageTable(t *testing.T) {
	is := is.New(t)
	tab := newImageTable(map[string]string{"example.com/worker": "/opt/worker", "example.com/worker:v2": "/opt/worker2"})
	self, err := os.Executable()
	is.NoErr(err)
	for image, want := range map[string]string{
		ImageTestProgram:               self,
		ImageTestProgram + ":latest":   self,
		"busybox:1.36":                 "",
		"docker.io/library/busybox":    "",
		"example.com/worker:v1":        "/opt/worker",
		"example.com/worker:v2":        "/opt/worker2",
		"example.com/worker@sha256:ab": "/opt/worker",
	} {
		got, err := tab.resolve(image)
		is.NoErr(err)
		is.Equal(got, want) // image → binary
	}
	_, err = tab.resolve("example.com/unknown:v1")
	is.True(err != nil)
	is.True(strings.Contains(err.Error(), "known: alpine, busybox")) // error lists the table
	is.True(tab.isTestProgram(ImageTestProgram + ":v1"))
	is.True(!tab.isTestProgram("busybox"))
}

func TestEnvExpand(t *testing.T) {
	is := is.New(t)
	e := newEnvList()
	e.set("A", "x")
	e.set("B", "y")
	e.set("A", "z") // later definition replaces, keeps order
	is.Equal(e.list(), []string{"A=z", "B=y"})
	for in, want := range map[string]string{
		"$(A)-$(B)":   "z-y",
		"$$(A)":       "$(A)",
		"$(MISSING)":  "$(MISSING)",
		"a$b":         "a$b",
		"$(A":         "$(A",
		"plain":       "plain",
		"end$":        "end$",
		"$(A)$(A)$$x": "zz$x",
	} {
		is.Equal(e.expand(in), want) // kubelet $(VAR) rules
	}
}

func TestResourceFieldRef(t *testing.T) {
	is := is.New(t)
	c := corev1.Container{Name: "main", Resources: corev1.ResourceRequirements{
		Limits:   corev1.ResourceList{ResourceTPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("1Gi")},
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1500m")},
	}}
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{c}}}
	v, err := resourceFieldRef(pod, c, &corev1.ResourceFieldSelector{Resource: "limits.google.com/tpu"})
	is.NoErr(err)
	is.Equal(v, "4")
	v, err = resourceFieldRef(pod, c, &corev1.ResourceFieldSelector{Resource: "requests.cpu"})
	is.NoErr(err)
	is.Equal(v, "2") // rounded up
	v, err = resourceFieldRef(pod, c, &corev1.ResourceFieldSelector{Resource: "limits.memory", Divisor: resource.MustParse("1Mi")})
	is.NoErr(err)
	is.Equal(v, "1024")
}

func TestIPAllocatorUnique(t *testing.T) {
	is := is.New(t)
	a := newIPAllocator()
	t.Cleanup(a.release)
	seen := map[string]bool{}
	for range 70000 {
		ip := a.next()
		is.True(ip.IsLoopback())
		b := ip.As4()
		is.True(b[3] != 0 && b[3] != 255) // no network or broadcast-looking addresses
		is.True(!seen[ip.String()])
		seen[ip.String()] = true
	}
}

// Live control planes never share a loopback block: each holds its block's
// lock (a separate open of the lock file conflicts as another process's
// would), so while allocators hold blocks, every one is different, and a
// released block can be taken again. Blocks that other processes on the
// machine hold are skipped; with random blocks and no locks, 150
// allocators would share one almost surely.
func TestIPAllocatorBlocksExclusive(t *testing.T) {
	is := is.New(t)
	var held []*ipAllocator
	t.Cleanup(func() {
		for _, a := range held {
			a.release()
		}
	})
	blocks := map[int]bool{}
	for range loopbackBlocks {
		a := newIPAllocator()
		held = append(held, a)
		if a.lock == nil {
			break // every free block is held (some by other processes)
		}
		is.True(a.base >= firstLoopbackBlock && a.base < firstLoopbackBlock+loopbackBlocks)
		is.True(!blocks[a.base]) // a block held twice
		blocks[a.base] = true
	}
	is.True(len(blocks) > loopbackBlocks/2) // most blocks were free to take
	// A released block is free again.
	a := held[0]
	base := a.base
	a.release()
	f := lockLoopbackBlock(base)
	is.True(f != nil)
	f.Close()
}

func TestTestProgram(t *testing.T) {
	is := is.New(t)
	var out bytes.Buffer
	is.Equal(testProgram([]string{"exit", "7"}, &out), 7)
	is.True(strings.Contains(out.String(), "exiting with 7"))
	is.Equal(testProgram([]string{"nope"}, &out), 2)
	is.Equal(testProgram(nil, &out), 2)
}

// TestStartSkipsWithoutE2E checks the fast path: without GORAY_E2E=1 the
// harness skips, whatever binaries exist.
func TestStartSkipsWithoutE2E(t *testing.T) {
	is := is.New(t)
	t.Setenv(EnvE2E, "")
	_, msg, err := checkEnvironment(t.TempDir())
	is.Equal(err, errSkip)
	is.True(strings.Contains(msg, "GORAY_E2E=1"))

	t.Setenv(EnvE2E, "1")
	if testing.Short() {
		return
	}
	_, _, err = checkEnvironment(t.TempDir())
	is.True(err != nil && err != errSkip) // required but missing: a failure
	is.True(strings.Contains(err.Error(), "scripts/k8s-build.sh"))
}

// TestBuildScriptKey keeps the folder the build script fills and the one
// the harness reads in step.
func TestBuildScriptKey(t *testing.T) {
	is := is.New(t)
	root, err := repoRoot()
	is.NoErr(err)
	b, err := os.ReadFile(filepath.Join(root, "scripts", "k8s-build.sh"))
	is.NoErr(err)
	s := string(b)
	for name, want := range map[string]string{
		"KUBE_VERSION": KubeVersion, "ETCD_VERSION": EtcdVersion, "KWOK_VERSION": KwokVersion, "COREDNS_VERSION": CoreDNSVersion,
	} {
		m := regexp.MustCompile(`(?m)^` + name + `=(\S+)$`).FindStringSubmatch(s)
		is.True(m != nil)
		is.Equal(m[1], want) // version pinned in scripts/k8s-build.sh
	}
	is.True(strings.Contains(s, `KEY="k8s-${KUBE_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_coredns-${COREDNS_VERSION}"`))
	dir, err := DefaultBinDir()
	is.NoErr(err)
	is.Equal(filepath.Base(filepath.Dir(dir)), "k8s-v1.37.2_etcd-v3.7.3_kwok-v0.8.0_coredns-v1.15.0")
	gomod, err := os.ReadFile(filepath.Join(root, "tools", "coredns", "go.mod"))
	is.NoErr(err)
	is.True(strings.Contains(string(gomod), "github.com/coredns/coredns "+CoreDNSVersion+"\n")) // tools/coredns builds the pinned version
}

// TestKueueBuildScriptVersion keeps scripts/kueue-build.sh, tools/kueue
// and the harness on one Kueue version, and Kueue's folder apart from the
// control-plane binaries'.
func TestKueueBuildScriptVersion(t *testing.T) {
	is := is.New(t)
	root, err := repoRoot()
	is.NoErr(err)
	b, err := os.ReadFile(filepath.Join(root, "scripts", "kueue-build.sh"))
	is.NoErr(err)
	m := regexp.MustCompile(`(?m)^KUEUE_VERSION=(\S+)$`).FindStringSubmatch(string(b))
	is.True(m != nil)
	is.Equal(m[1], KueueVersion) // version pinned in scripts/kueue-build.sh
	is.True(strings.Contains(string(b), `KEY="kueue-${KUEUE_VERSION}"`))
	gomod, err := os.ReadFile(filepath.Join(root, "tools", "kueue", "go.mod"))
	is.NoErr(err)
	is.True(strings.Contains(string(gomod), "\tsigs.k8s.io/kueue "+KueueVersion+"\n")) // tools/kueue builds the pinned version

	t.Setenv(EnvKueueBinDir, "")
	t.Setenv(EnvBinDir, "/x/.cache/k8s/"+binDirKey+"/bin")
	dir, err := KueueBinDir()
	is.NoErr(err)
	is.Equal(dir, "/x/.cache/k8s/kueue-"+KueueVersion+"/bin") // beside the control-plane binaries, never in their folder
}
