// Command coredns is CoreDNS (github.com/coredns/coredns, at the version
// go.mod pins) with only the plugins the goray test harness
// (internal/kubeharness) uses: the cluster DNS of its network-isolated pods
// (kubernetes for cluster.local, template to answer every other name with
// NXDOMAIN so nothing leaves the machine, bind, ready, health, errors and
// log). It is built by scripts/k8s-build.sh like the other control-plane
// binaries; see docs/harness.md.
//
// This is CoreDNS's documented way to build a smaller server: set
// dnsserver.Directives to the plugins wanted, in the order of CoreDNS's own
// plugin.cfg, and call coremain.Run.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/template"
)

// directives are the plugins compiled in, in CoreDNS's plugin.cfg order
// (core/dnsserver/zdirectives.go at the pinned version).
var directives = []string{
	"bind",
	"ready",
	"health",
	"errors",
	"log",
	"template",
	"kubernetes",
}

func init() {
	dnsserver.Directives = directives
}

func main() {
	coremain.Run()
}
