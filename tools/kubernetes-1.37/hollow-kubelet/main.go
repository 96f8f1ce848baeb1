// hollow-kubelet runs kubemark's hollow kubelet (k8s.io/kubernetes/pkg/kubemark: the kubelet's
// own code over a fake container runtime, a fake image service and a stub container manager)
// as cmd/kubemark does with --morph=kubelet --use-host-image-service=false, with one change:
// its HTTP server binds 127.0.0.1, not 0.0.0.0 (kubemark hard-codes the address), so the tests'
// control plane listens on loopback only; and --runtime-socket names the fake runtime's socket,
// which a killed process leaves behind, so the tests can remove it. Built by tools/testbin from
// this pinned module.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/version"
	remote "k8s.io/cri-client/pkg"
	fakeremote "k8s.io/cri-client/pkg/fake"
	"k8s.io/klog/v2"
	cadvisortest "k8s.io/kubernetes/pkg/kubelet/cadvisor/testing"
	"k8s.io/kubernetes/pkg/kubelet/cm"
	"k8s.io/kubernetes/pkg/kubemark"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "hollow-kubelet:", err)
		os.Exit(1)
	}
}

func run() error {
	name := flag.String("name", "", "the node's name")
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the API server")
	port := flag.Int("kubelet-port", 0, "port of the kubelet's HTTP server (on 127.0.0.1)")
	labels := flag.String("node-labels", "", "node labels, KEY=VALUE,...")
	maxPods := flag.Int("max-pods", 30, "pods the node takes")
	socket := flag.String("runtime-socket", "", "unix socket of the fake runtime (default: a random one in /tmp, as kubemark)")
	klog.InitFlags(nil)
	flag.Parse()
	if *name == "" || *kubeconfig == "" {
		return fmt.Errorf("--name and --kubeconfig are required")
	}
	klog.Infof("Version: %+v", version.Get())
	nodeLabels := map[string]string{}
	for _, kv := range strings.Split(*labels, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			nodeLabels[k] = v
		}
	}

	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fmt.Errorf("reading %s: %w", *kubeconfig, err)
	}
	config.UserAgent = "hollow-kubelet"
	config.QPS, config.Burst = 10, 20
	client, err := clientset.NewForConfig(config)
	if err != nil {
		return err
	}
	f, c := kubemark.GetHollowKubeletConfig(&kubemark.HollowKubeletOptions{
		NodeName:            *name,
		KubeletPort:         *port,
		KubeletReadOnlyPort: 0,
		MaxPods:             *maxPods,
		PodsPerCore:         0,
		NodeLabels:          nodeLabels,
	})
	// The one change from cmd/kubemark: loopback only.
	c.Address = "127.0.0.1"

	// As cmd/kubemark: heartbeats time out after the shorter of the status update period and the
	// Lease duration, and are never throttled.
	heartbeatConfig := *config
	heartbeatConfig.Timeout = c.NodeStatusUpdateFrequency.Duration
	if lease := time.Duration(c.NodeLeaseDurationSeconds) * time.Second; heartbeatConfig.Timeout > lease {
		heartbeatConfig.Timeout = lease
	}
	heartbeatConfig.QPS = -1
	heartbeatClient, err := clientset.NewForConfig(&heartbeatConfig)
	if err != nil {
		return err
	}

	ctx := context.Background()
	endpoint := "unix://" + *socket
	if *socket == "" {
		if endpoint, err = fakeremote.GenerateEndpoint(); err != nil {
			return err
		}
	}
	fakeRuntime := fakeremote.NewFakeRemoteRuntime()
	if err := fakeRuntime.Start(endpoint); err != nil {
		return fmt.Errorf("starting the fake runtime: %w", err)
	}
	defer fakeRuntime.Stop()
	runtimeService, err := remote.NewRemoteRuntimeServiceBuilder().
		WithEndpoint(endpoint).
		WithConnectionTimeout(15 * time.Second).
		Build(ctx)
	if err != nil {
		return fmt.Errorf("connecting to the fake runtime: %w", err)
	}
	kubemark.NewHollowKubelet(
		f, c, client, heartbeatClient,
		&cadvisortest.Fake{NodeName: *name},
		fakeRuntime.ImageService,
		runtimeService,
		// As cmd/kubemark, with no extended resources.
		cm.NewStubContainerManagerWithDevicePluginResource(v1.ResourceList{}),
	).Run(ctx)
	return nil
}
