// Command reporter is a singleton: while it leads, it writes the number of pods in its
// namespace into the ConfigMap "inventory" every 10 seconds. It leads while it holds the
// Lease "inventory-reporter" (client-go's leader election).
//
// Environment: POD_NAME and POD_NAMESPACE (downward API); in-cluster config. This is the
// before-program of docs/migration.md.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

const (
	lockName   = "inventory-reporter"
	reportName = "inventory"
	interval   = 10 * time.Second
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	cfg, err := rest.InClusterConfig()
	if err != nil {
		klog.Fatalf("load in-cluster config: %v", err)
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	ns, id := os.Getenv("POD_NAMESPACE"), os.Getenv("POD_NAME")

	// The Lease names the holder by identity; the pod name is the usual choice.
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: ns, Name: lockName},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   15 * time.Second,
		RenewDeadline:   10 * time.Second,
		RetryPeriod:     2 * time.Second,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				// ctx is cancelled when the Lease could not be renewed within RenewDeadline.
				ticker := time.NewTicker(interval)
				defer ticker.Stop()
				for {
					if err := report(ctx, client, ns, id); err != nil {
						klog.ErrorS(err, "report")
					}
					select {
					case <-ctx.Done():
						return
					case <-ticker.C:
					}
				}
			},
			OnStoppedLeading: func() {
				// Called when RunOrDie returns, whether or not this pod ever led. Exiting
				// lets the kubelet restart the container, which campaigns again.
				klog.InfoS("stopped leading", "identity", id)
				os.Exit(0)
			},
			OnNewLeader: func(identity string) {
				klog.InfoS("new leader", "identity", identity)
			},
		},
	})
}

// report writes the number of pods in ns into the ConfigMap reportName.
func report(ctx context.Context, client kubernetes.Interface, ns, writer string) error {
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list pods: %w", err)
	}
	data := map[string]string{"pods": strconv.Itoa(len(pods.Items)), "writer": writer}

	cms := client.CoreV1().ConfigMaps(ns)
	cm, err := cms.Get(ctx, reportName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: reportName}, Data: data}
		if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create configmap %s: %w", reportName, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("get configmap %s: %w", reportName, err)
	}
	cm.Data = data
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update configmap %s: %w", reportName, err)
	}
	return nil
}
