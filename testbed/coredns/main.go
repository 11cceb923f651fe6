// Command coredns is CoreDNS with only the plugins a cluster's DNS needs (the Corefile in
// testbed/addons uses them): upstream's main compiles in every plugin, with the cloud SDKs
// they bring, for nothing a test cluster resolves. The same pattern as CoreDNS's documented
// way to build with external plugins: set the directive order, then run coremain.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// The order plugins run in, as in upstream's plugin.cfg (the subset compiled in above).
var directives = []string{
	"reload", "health", "ready", "prometheus", "errors", "log", "loadbalance", "cache",
	"kubernetes", "loop",
}

func init() {
	dnsserver.Directives = directives
}

func main() {
	coremain.Run()
}
