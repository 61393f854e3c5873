// cert-manager's own controllers, for the e2e suite: the Certificate
// controllers, the CertificateRequest approver and its CA and SelfSigned
// signers, and the Issuer and ClusterIssuer setup, run from the packages of
// cert-manager's main module (github.com/cert-manager/cert-manager). Its
// controller binary is a module of its own (cmd/controller) that the module
// proxy does not serve here, so this file is the part of that binary's
// start-up that picks and runs controllers; every controller is
// cert-manager's code, unchanged. No webhook (nothing defaults or validates
// Certificates beyond the CRD's schema), no ACME, Vault or Venafi issuer,
// no leader election.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/klog/v2"

	"github.com/cert-manager/cert-manager/pkg/controller"
	logf "github.com/cert-manager/cert-manager/pkg/logs"

	// Each package registers its controllers (controller.Register) when
	// imported.
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	// The CA and SelfSigned issuer types the (Cluster)Issuer setup knows.
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

var controllers = []string{
	"issuers", "clusterissuers",
	"certificaterequests-approver",
	"certificaterequests-issuer-ca", "certificaterequests-issuer-selfsigned",
	"certificates-trigger", "certificates-key-manager", "certificates-request-manager",
	"certificates-issuing", "certificates-readiness", "certificates-revision-manager",
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "the kubeconfig to reach the API server with")
	clusterNS := flag.String("cluster-resource-namespace", "kube-system", "where ClusterIssuers' Secrets are")
	workers := flag.Int("workers", 2, "workers per controller")
	klog.InitFlags(nil)
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = logf.NewContext(ctx, logf.Log, "cert-manager")
	if err := run(ctx, *kubeconfig, *clusterNS, *workers); err != nil {
		fmt.Fprintln(os.Stderr, "cert-manager:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig, clusterNS string, workers int) error {
	// cert-manager waits an hour (doubling to 32) before it asks again for a
	// certificate whose request failed; a test cannot wait that long after a
	// request that failed on a loaded machine: 10 s, doubling to 5 min.
	f, err := controller.NewContextFactory(ctx, controller.ContextOptions{
		Kubeconfig:         kubeconfig,
		KubernetesAPIQPS:   20,
		KubernetesAPIBurst: 50,
		IssuerOptions:      controller.IssuerOptions{ClusterResourceNamespace: clusterNS},
		CertificateOptions: controller.CertificateOptions{
			CertificateRequestMinimumBackoffDuration: 10 * time.Second,
			CertificateRequestMaximumBackoffDuration: 5 * time.Minute,
		},
	})
	if err != nil {
		return err
	}
	base, err := f.Build()
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	known := controller.Known()
	for _, name := range controllers {
		construct, ok := known[name]
		if !ok {
			return fmt.Errorf("controller %q is not registered", name)
		}
		c, err := construct(f)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		klog.InfoS("starting controller", "controller", name)
		g.Go(func() error { return c.Run(workers, gctx) })
	}
	// After every controller has added its handlers, as cert-manager does.
	base.SharedInformerFactory.Start(gctx.Done())
	base.KubeSharedInformerFactory.Start(gctx.Done())
	base.HTTP01ResourceMetadataInformersFactory.Start(gctx.Done())
	err = g.Wait()
	base.KubeSharedInformerFactory.Shutdown()
	base.SharedInformerFactory.Shutdown()
	return err
}
