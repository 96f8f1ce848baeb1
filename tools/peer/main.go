// Command peer is the Go peer of kube-remediator's whole-process benchmark (benches/rss.rs):
// a controller-runtime program that does kube-remediator's core job on the same policy, so both
// can be measured on the same control plane, in the same run, by the same tool (/proc and the API
// server's audit log).
//
// The job: force-delete (grace period 0, UID precondition, after a fresh uncached read) every pod
// that has a deletionTimestamp, whose deletionTimestamp + --delay-after-grace has passed (the API
// server's deletionTimestamp already includes the pod's grace period), on a node whose Ready
// condition has been other than True for --not-ready-for and whose kubelet Lease (namespace
// kube-node-lease) has not been renewed for --lease-stale-for, both timed by this process's own
// clock from when it saw the change, never by comparing another machine's timestamps with it.
// DaemonSet and mirror pods are never touched. It is the kube-remediator policy the benchmark
// creates (mode Enforce, notReadyFor and leaseStaleFor 40s, delayAfterGrace 30s,
// requireFencingFor [None]), without the storm guards, rate limits, Events and status.
//
// It watches what kube-remediator watches, one informer per kind: Nodes, Leases of
// kube-node-lease, Pods, Namespaces, PersistentVolumeClaims, Deployments, StatefulSets and
// ReplicaSets, with a spec.nodeName index on Pods (how a Go controller finds a node's pods), and
// elects a leader on a Lease as kube-remediator does. Two modes:
//
//	--mode naive   plain informers of full objects: what most controllers ship.
//	--mode tuned   cache.TransformStripManagedFields as the DefaultTransform of every kind, and
//	               for Pods a transform that keeps only what the decision and a policy's scope
//	               read (name, namespace, uid, labels, owner references, deletion fields, the
//	               mirror annotation, nodeName, grace period, PVC volumes, phase): the tuning
//	               controller-runtime documents, short of metadata-only watches.
//
// Why this is a fair peer: sigs.k8s.io/controller-runtime v0.24.1 is the newest release built
// against the Kubernetes 1.36 libraries (its go.mod requires k8s.io/client-go v0.36.0; v0.25
// moves to 0.37), used here with client-go v0.36.3, the patch release of the control plane the
// benchmark runs (Kubernetes 1.36.3). So it gets the same API server, the same WatchList
// streaming of initial state (client-go 0.36 enables WatchListClient by default) and the
// informer code every current Go operator shares; nothing in it is slowed down on purpose. Go
// runs with its defaults (GOGC=100, no GOMEMLIMIT), as such operators usually ship.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

const (
	leaseNamespace   = "kube-node-lease"
	mirrorAnnotation = "kubernetes.io/config.mirror"
	nodeNameIndex    = "spec.nodeName"
)

func main() {
	var (
		mode, metricsAddr, probeAddr, electionNamespace, electionName string
		notReadyFor, leaseStaleFor, delayAfterGrace                   time.Duration
	)
	flag.StringVar(&mode, "mode", "naive", "naive (full-object informers) or tuned (transforms)")
	// --kubeconfig is controller-runtime's own flag (see ctrl.GetConfig).
	flag.StringVar(&metricsAddr, "metrics-addr", "0", "address of /metrics (0: off)")
	flag.StringVar(&probeAddr, "probe-addr", "127.0.0.1:8081", "address of /readyz: 200 once every informer has synced and this replica leads")
	flag.StringVar(&electionNamespace, "leader-election-namespace", "default", "namespace of the leader Lease")
	flag.StringVar(&electionName, "leader-election-lease", "kube-remediator-peer", "name of the leader Lease")
	flag.DurationVar(&notReadyFor, "not-ready-for", 40*time.Second, "how long a node's Ready condition must have been other than True")
	flag.DurationVar(&leaseStaleFor, "lease-stale-for", 40*time.Second, "how long a node's Lease must have gone unrenewed")
	flag.DurationVar(&delayAfterGrace, "delay-after-grace", 30*time.Second, "wait after a pod's deletionTimestamp")
	flag.Parse()
	ctrl.SetLogger(zap.New())
	if err := run(mode, metricsAddr, probeAddr, electionNamespace, electionName,
		policy{notReadyFor, leaseStaleFor, delayAfterGrace}); err != nil {
		fmt.Fprintln(os.Stderr, "peer:", err)
		os.Exit(1)
	}
}

type policy struct {
	notReadyFor, leaseStaleFor, delayAfterGrace time.Duration
}

func run(mode, metricsAddr, probeAddr, electionNamespace, electionName string, pol policy) error {
	leases := cache.ByObject{Namespaces: map[string]cache.Config{leaseNamespace: {}}}
	cacheOpts := cache.Options{ByObject: map[client.Object]cache.ByObject{}}
	switch mode {
	case "naive":
	case "tuned":
		cacheOpts.DefaultTransform = cache.TransformStripManagedFields()
		cacheOpts.ByObject[&corev1.Pod{}] = cache.ByObject{Transform: compactPod}
		leases.Transform = cache.TransformStripManagedFields()
	default:
		return fmt.Errorf("unknown --mode %q (naive or tuned)", mode)
	}
	cacheOpts.ByObject[&coordinationv1.Lease{}] = leases

	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	// No client-side throttling, as kube-rs has none: the comparison is of caches, not pacing.
	cfg.QPS, cfg.Burst = -1, -1
	cfg.UserAgent = "kube-remediator-peer/" + mode
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Cache:                   cacheOpts,
		Metrics:                 metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress:  probeAddr,
		LeaderElection:          true,
		LeaderElectionID:        electionName,
		LeaderElectionNamespace: electionNamespace,
	})
	if err != nil {
		return err
	}
	ctx := ctrl.SetupSignalHandler()

	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, nodeNameIndex, func(o client.Object) []string {
		if pod, ok := o.(*corev1.Pod); ok && pod.Spec.NodeName != "" {
			return []string{pod.Spec.NodeName}
		}
		return nil
	}); err != nil {
		return err
	}

	r := &remediator{client: mgr.GetClient(), fresh: mgr.GetAPIReader(), policy: pol, seen: newSightings()}

	// Own-clock evidence: when this process saw each node's Ready condition leave True and each
	// Lease's renewTime change.
	leaseInformer, err := mgr.GetCache().GetInformer(ctx, &coordinationv1.Lease{})
	if err != nil {
		return err
	}
	if _, err := leaseInformer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { r.seen.lease(o, nil) },
		UpdateFunc: func(old, o any) { r.seen.lease(o, old) },
	}); err != nil {
		return err
	}
	nodeInformer, err := mgr.GetCache().GetInformer(ctx, &corev1.Node{})
	if err != nil {
		return err
	}
	if _, err := nodeInformer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { r.seen.node(o) },
		UpdateFunc: func(_, o any) { r.seen.node(o) },
	}); err != nil {
		return err
	}
	// The kinds kube-remediator also watches (a policy's namespaceSelector, RWO claims, blocked
	// rollouts): one informer each.
	for _, o := range []client.Object{&corev1.Namespace{}, &corev1.PersistentVolumeClaim{},
		&appsv1.Deployment{}, &appsv1.StatefulSet{}, &appsv1.ReplicaSet{}} {
		if _, err := mgr.GetCache().GetInformer(ctx, o); err != nil {
			return err
		}
	}

	// A pod is looked at when it changes, and its node's Terminating pods when the node's Ready
	// condition changes; Lease renewals only move the deadlines, which each reconcile computes
	// again when its requeue comes.
	podsOfNode := func(ctx context.Context, o client.Object) []reconcile.Request {
		var pods corev1.PodList
		if err := mgr.GetClient().List(ctx, &pods, client.MatchingFields{nodeNameIndex: o.GetName()}); err != nil {
			return nil
		}
		var out []reconcile.Request
		for i := range pods.Items {
			if pods.Items[i].DeletionTimestamp != nil {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&pods.Items[i])})
			}
		}
		return out
	}
	readyChanged := predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			old, ok1 := e.ObjectOld.(*corev1.Node)
			now, ok2 := e.ObjectNew.(*corev1.Node)
			return !ok1 || !ok2 || nodeReady(old) != nodeReady(now)
		},
	}
	if err := ctrl.NewControllerManagedBy(mgr).
		Named("stuck-terminating").
		For(&corev1.Pod{}).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(podsOfNode),
			builder.WithPredicates(readyChanged)).
		Complete(r); err != nil {
		return err
	}

	var ready atomic.Bool
	if err := mgr.AddReadyzCheck("synced-and-leading", func(*http.Request) error {
		if !ready.Load() {
			return errors.New("informers not synced or not the leader yet")
		}
		return nil
	}); err != nil {
		return err
	}
	started := time.Now()
	go func() {
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return
		}
		select {
		case <-mgr.Elected():
		case <-ctx.Done():
			return
		}
		ready.Store(true)
		ctrl.Log.Info("synced and leading", "mode", mode, "after", time.Since(started).String())
	}()
	return mgr.Start(ctx)
}

// compactPod keeps what the decision reads and what a policy's scope would (labels, owner
// kind, PVC claims), and drops the rest of the pod: containers, status, managedFields, most
// annotations.
func compactPod(in any) (any, error) {
	pod, ok := in.(*corev1.Pod)
	if !ok {
		return in, nil
	}
	out := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:                       pod.Name,
			Namespace:                  pod.Namespace,
			UID:                        pod.UID,
			ResourceVersion:            pod.ResourceVersion,
			Labels:                     pod.Labels,
			OwnerReferences:            pod.OwnerReferences,
			DeletionTimestamp:          pod.DeletionTimestamp,
			DeletionGracePeriodSeconds: pod.DeletionGracePeriodSeconds,
		},
		Spec: corev1.PodSpec{
			NodeName:                      pod.Spec.NodeName,
			TerminationGracePeriodSeconds: pod.Spec.TerminationGracePeriodSeconds,
		},
		Status: corev1.PodStatus{Phase: pod.Status.Phase},
	}
	if v, ok := pod.Annotations[mirrorAnnotation]; ok {
		out.Annotations = map[string]string{mirrorAnnotation: v}
	}
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			out.Spec.Volumes = append(out.Spec.Volumes, corev1.Volume{Name: v.Name,
				VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: v.PersistentVolumeClaim}})
		}
	}
	return out, nil
}

// sightings are this process's own-clock observations: when it last saw each Lease's renewTime
// change, and since when it has seen each node's Ready condition other than True.
type sightings struct {
	mu        sync.Mutex
	renewed   map[string]time.Time
	notReady  map[string]time.Time
	startedAt time.Time
}

func newSightings() *sightings {
	return &sightings{renewed: map[string]time.Time{}, notReady: map[string]time.Time{}, startedAt: time.Now()}
}

func (s *sightings) lease(o, old any) {
	l, ok := o.(*coordinationv1.Lease)
	if !ok {
		return
	}
	if prev, ok := old.(*coordinationv1.Lease); ok && prev.Spec.RenewTime.Equal(l.Spec.RenewTime) {
		return
	}
	s.mu.Lock()
	s.renewed[l.Name] = time.Now()
	s.mu.Unlock()
}

func (s *sightings) node(o any) {
	n, ok := o.(*corev1.Node)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if nodeReady(n) {
		delete(s.notReady, n.Name)
	} else if _, seen := s.notReady[n.Name]; !seen {
		s.notReady[n.Name] = time.Now()
	}
}

// deadSince is when the node counts as dead by the policy, if it is on its way there: the later
// of the two own-clock deadlines. A node without a Lease sighting counts as unrenewed since this
// process started.
func (s *sightings) deadSince(node string, pol policy) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	since, notReady := s.notReady[node]
	if !notReady {
		return time.Time{}, false
	}
	renewed, ok := s.renewed[node]
	if !ok {
		renewed = s.startedAt
	}
	a, b := since.Add(pol.notReadyFor), renewed.Add(pol.leaseStaleFor)
	if b.After(a) {
		return b, true
	}
	return a, true
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

type remediator struct {
	client client.Client
	fresh  client.Reader
	policy policy
	seen   *sightings
}

// Reconcile decides for one pod from the cache, and acts only after a fresh read agrees.
func (r *remediator) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var pod corev1.Pod
	if err := r.client.Get(ctx, req.NamespacedName, &pod); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	wait, ok := r.due(&pod, time.Now())
	if !ok {
		return reconcile.Result{}, nil
	}
	if wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	var current corev1.Pod
	if err := r.fresh.Get(ctx, req.NamespacedName, &current); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if current.UID != pod.UID {
		return reconcile.Result{}, nil
	}
	if wait, ok := r.due(&current, time.Now()); !ok || wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	uid := current.UID
	err := r.client.Delete(ctx, &current, client.GracePeriodSeconds(0),
		client.Preconditions{UID: &uid})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return reconcile.Result{}, err
	}
	ctrl.LoggerFrom(ctx).Info("force-deleted a pod stuck Terminating on a dead node", "node", current.Spec.NodeName)
	return reconcile.Result{}, nil
}

// due says whether the policy covers the pod and, if so, how long until it may be released.
func (r *remediator) due(pod *corev1.Pod, now time.Time) (time.Duration, bool) {
	if pod.DeletionTimestamp == nil || pod.Spec.NodeName == "" {
		return 0, false
	}
	if _, mirror := pod.Annotations[mirrorAnnotation]; mirror {
		return 0, false
	}
	if owner := metav1.GetControllerOf(pod); owner != nil && owner.Kind == "DaemonSet" {
		return 0, false
	}
	dead, ok := r.seen.deadSince(pod.Spec.NodeName, r.policy)
	if !ok {
		return 0, false
	}
	at := pod.DeletionTimestamp.Add(r.policy.delayAfterGrace)
	if dead.After(at) {
		at = dead
	}
	return at.Sub(now), true
}
