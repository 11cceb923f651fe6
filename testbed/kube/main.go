// Command kube is one multi-call binary for the Kubernetes 1.35 components the test cluster runs:
// kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy and kubectl.
// One binary compiles the packages they share once (the old hyperkube did the same). The component
// is the first argument, or the name the binary is called by (a symlink named kubectl works).
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	_ "time/tzdata" // CronJob time zones

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	kubectl "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

var servers = map[string]func() *cobra.Command{
	"kube-apiserver":          apiserver.NewAPIServerCommand,
	"kube-controller-manager": controllermanager.NewControllerManagerCommand,
	"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
	"kubelet":                 func() *cobra.Command { return kubelet.NewKubeletCommand(context.Background()) },
	"kube-proxy":              proxy.NewProxyCommand,
}

func main() {
	name, args := filepath.Base(os.Args[0]), os.Args[1:]
	if _, known := servers[name]; !known && name != "kubectl" && len(args) > 0 {
		name, args = args[0], args[1:]
	}
	os.Args = append([]string{name}, args...)
	if name == "kubectl" {
		runKubectl()
		return
	}
	build, known := servers[name]
	if !known {
		names := []string{"kubectl"}
		for n := range servers {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintf(os.Stderr, "usage: kube COMPONENT [flags...]; COMPONENT is one of %v\n", names)
		os.Exit(2)
	}
	command := build()
	command.SetArgs(args)
	os.Exit(cli.Run(command))
}

func runKubectl() {
	// As cmd/kubectl does: read the verbosity before the command is built, so plugin and
	// .kuberc handling log at the level asked for.
	logs.GlogSetter(kubectl.GetLogVerbosity(os.Args)) // nolint:errcheck
	if err := cli.RunNoErrOutput(kubectl.NewDefaultKubectlCommand()); err != nil {
		kubectlutil.CheckErr(err)
	}
}
