// Command apiserver runs the real Kubernetes API server code for custom resources
// (k8s.io/apiextensions-apiserver) on loopback, for radixfleet's tests.
//
// The module's own `main` cannot start outside a cluster: it delegates authentication,
// authorization and its informers to a "core" kube-apiserver that it looks for in-cluster, and it
// leaves the discovery roots /api and /apis to the aggregator in front of it, so kubectl cannot
// map a kind to a resource. This main uses the module's options as a library, the way its own
// StartTestServer does, and closes those gaps:
//
//   - delegation points at a loopback port where nothing listens; nothing is ever delegated,
//     because the kubeconfig we write carries the server's loopback token, whose user is in
//     system:masters (authenticated and authorized in-process);
//   - /apis serves discovery of every group (aggregated and classic), /api an empty core group;
//   - it serves on a free 127.0.0.1 port, writes a kubeconfig for it, prints "READY <url>" on
//     stdout once /healthz is ok, and serves until SIGTERM or SIGINT.
//
// Run it in an empty folder: it writes its certificates, the delegation kubeconfig and the
// kubeconfig for clients ("kubeconfig") there. Flags are those of the apiextensions server, e.g.
// --etcd-servers.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	extensionsapiserver "k8s.io/apiextensions-apiserver/pkg/apiserver"
	"k8s.io/apiextensions-apiserver/pkg/cmd/server/options"
	generatedopenapi "k8s.io/apiextensions-apiserver/pkg/generated/openapi"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	discoveryendpoint "k8s.io/apiserver/pkg/endpoints/discovery/aggregated"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/util/openapi"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// The delegation target. Port 1 on loopback: nothing listens there, and only requests from users
// other than the loopback one would be sent; the tests send none.
const unreachableCore = `apiVersion: v1
kind: Config
clusters:
- cluster: {server: "http://127.0.0.1:1"}
  name: none
contexts:
- context: {cluster: none, user: none}
  name: none
current-context: none
users:
- name: none
  user: {username: none, password: none}
`

// Files written to the working directory.
const (
	coreKubeconfig = "core-kubeconfig"
	kubeconfigOut  = "kubeconfig"
)

// The discovery media type that kubectl and client-go ask for first.
const aggregatedAccept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, args []string) error {
	if err := os.WriteFile(coreKubeconfig, []byte(unreachableCore), 0o600); err != nil {
		return err
	}
	opts := options.NewCustomResourceDefinitionsServerOptions(os.Stdout, os.Stderr)
	fs := pflag.NewFlagSet("apiserver", pflag.ContinueOnError)
	opts.AddFlags(fs)
	// Our defaults go first so that a flag given on the command line wins.
	if err := fs.Parse(append(defaultFlags(coreKubeconfig), args...)); err != nil {
		return err
	}
	server, err := newServer(opts)
	if err != nil {
		return err
	}
	return serve(ctx, server, kubeconfigOut)
}

func defaultFlags(core string) []string {
	return []string{
		"--authentication-skip-lookup",
		"--authentication-kubeconfig", core,
		"--authorization-kubeconfig", core,
		"--kubeconfig", core,
		// These plugins consult namespaces, webhooks or policies in the core API: there is none.
		"--disable-admission-plugins",
		"NamespaceLifecycle,MutatingAdmissionWebhook,ValidatingAdmissionWebhook," +
			"ValidatingAdmissionPolicy,MutatingAdmissionPolicy",
		// Priority and fairness keeps its configuration in objects of the core API server.
		"--enable-priority-and-fairness=false",
		"--runtime-config", "api/all=true",
	}
}

func newServer(opts *options.CustomResourceDefinitionsServerOptions) (*extensionsapiserver.CustomResourceDefinitions, error) {
	if err := opts.ServerRunOptions.ComponentGlobalsRegistry.Set(); err != nil {
		return nil, err
	}
	// Listen before configuring, so the port is ours and known (no race for a "free" port).
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	serving := opts.RecommendedOptions.SecureServing
	serving.Listener = listener
	serving.BindPort = listener.Addr().(*net.TCPAddr).Port
	serving.ExternalAddress = net.IPv4(127, 0, 0, 1)
	serving.ServerCert.CertDirectory = "."
	if err := opts.Complete(); err != nil {
		return nil, err
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	config, err := opts.Config()
	if err != nil {
		return nil, err
	}
	// OpenAPI v2 as well as v3, as the module's test server does: older clients read v2.
	definitions := openapi.GetOpenAPIDefinitionsWithoutDisabledFeatures(generatedopenapi.GetOpenAPIDefinitions)
	namer := openapinamer.NewDefinitionNamer(extensionsapiserver.Scheme)
	config.GenericConfig.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(definitions, namer)
	server, err := config.Complete().New(genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, err
	}
	installDiscoveryRoots(server.GenericAPIServer)
	return server, nil
}

// installDiscoveryRoots serves /apis from the aggregated discovery that the server keeps up to
// date for every CRD, in both its aggregated form and the classic APIGroupList, and serves /api as
// a core group with no versions, since this server has no core resources.
func installDiscoveryRoots(s *genericapiserver.GenericAPIServer) {
	aggregated := s.AggregatedDiscoveryGroupManager
	classic := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		groups, err := classicGroups(aggregated, r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		writeJSON(w, groups)
	})
	apis := discoveryendpoint.WrapAggregatedDiscoveryToHandler(classic, aggregated, aggregated)
	s.Handler.GoRestfulContainer.Add(apis.GenerateWebService("/apis", metav1.APIGroupList{}))

	legacy := s.AggregatedLegacyDiscoveryGroupManager
	noCore := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		// Empty lists, not nulls: some clients iterate them without a check.
		writeJSON(w, metav1.APIVersions{
			TypeMeta:                   metav1.TypeMeta{Kind: "APIVersions"},
			Versions:                   []string{},
			ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{},
		})
	})
	api := discoveryendpoint.WrapAggregatedDiscoveryToHandler(noCore, legacy, legacy)
	s.Handler.GoRestfulContainer.Add(api.GenerateWebService("/api", metav1.APIVersions{}))
}

// classicGroups asks the aggregated handler for its list and converts it to an APIGroupList,
// so that both forms always come from one source.
func classicGroups(aggregated http.Handler, r *http.Request) (*metav1.APIGroupList, error) {
	req := r.Clone(r.Context())
	req.Header.Set("Accept", aggregatedAccept)
	rec := httptest.NewRecorder()
	aggregated.ServeHTTP(rec, req)
	var list apidiscoveryv2.APIGroupDiscoveryList
	if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil {
		return nil, fmt.Errorf("decoding aggregated discovery (%d): %w", rec.Code, err)
	}
	out := &metav1.APIGroupList{
		TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"},
		Groups:   []metav1.APIGroup{},
	}
	for _, g := range list.Items {
		group := metav1.APIGroup{Name: g.Name}
		for _, v := range g.Versions {
			gv := metav1.GroupVersionForDiscovery{GroupVersion: g.Name + "/" + v.Version, Version: v.Version}
			group.Versions = append(group.Versions, gv)
		}
		if len(group.Versions) > 0 {
			// Aggregated discovery lists versions by priority: the first is preferred.
			group.PreferredVersion = group.Versions[0]
			out.Groups = append(out.Groups, group)
		}
	}
	return out, nil
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// serve runs the server until ctx ends, announcing readiness once /healthz answers ok.
func serve(ctx context.Context, server *extensionsapiserver.CustomResourceDefinitions, kubeconfigOut string) error {
	prepared := server.GenericAPIServer.PrepareRun()
	done := make(chan error, 1)
	go func() { done <- prepared.RunWithContext(ctx) }()
	cfg := server.GenericAPIServer.LoopbackClientConfig
	if err := waitHealthy(ctx, cfg, done); err != nil {
		return err
	}
	if err := writeKubeconfig(cfg, kubeconfigOut); err != nil {
		return err
	}
	fmt.Printf("READY %s\n", cfg.Host)
	return <-done
}

// waitHealthy polls /healthz rather than /readyz: readiness also waits for informers of core
// resources (Services, for conversion webhooks), which never sync without a core API server.
func waitHealthy(ctx context.Context, cfg *rest.Config, done <-chan error) error {
	client, err := rest.UnversionedRESTClientFor(withJSON(cfg))
	if err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true,
		func(ctx context.Context) (bool, error) {
			select {
			case err := <-done:
				return false, fmt.Errorf("server stopped while starting: %w", err)
			default:
			}
			status := 0
			client.Get().AbsPath("/healthz").Do(ctx).StatusCode(&status)
			return status == http.StatusOK, nil
		})
}

func withJSON(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &metav1.SchemeGroupVersion
	c.NegotiatedSerializer = extensionsapiserver.Codecs.WithoutConversion()
	return c
}

// writeKubeconfig turns the server's loopback client config (bearer token, CA, and the server
// name its certificate was issued for) into a kubeconfig for kubectl and clients.
func writeKubeconfig(cfg *rest.Config, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["radixfleet-test"] = &clientcmdapi.Cluster{
		Server:                   cfg.Host,
		CertificateAuthorityData: cfg.TLSClientConfig.CAData,
		TLSServerName:            cfg.TLSClientConfig.ServerName,
	}
	kc.AuthInfos["radixfleet-test"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["radixfleet-test"] = &clientcmdapi.Context{
		Cluster: "radixfleet-test", AuthInfo: "radixfleet-test", Namespace: "default",
	}
	kc.CurrentContext = "radixfleet-test"
	tmp := path + ".tmp"
	if err := clientcmd.WriteToFile(*kc, tmp); err != nil {
		return err
	}
	// Rename, so that a reader polling for the file never sees half of it.
	return os.Rename(tmp, path)
}
