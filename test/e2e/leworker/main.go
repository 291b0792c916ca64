// Command leworker is the client-go side of the real-pod benchmark (test/e2e): a pod that
// runs client-go's leader election on a Lease with ReleaseOnCancel, in the same Deployment
// shape as the fenced-worker, so a planned handoff (delete the leader) can be measured side
// by side with lockwarden's. Environment: POD_NAME, POD_NAMESPACE, LEASE_NAME, and
// LEDGER_URL (optional): while it leads, it POSTs {"writer": POD_NAME} to LEDGER_URL/write at
// once and then every 500 ms, as the fenced-worker writes its ledger (client-go hands out no
// token, so these writes are not fenced); the benchmark ends a handoff at the new leader's
// first write. Durations from -lease-duration, -renew-deadline and -retry-period;
// -release-on-cancel (default true) is client-go's ReleaseOnCancel.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "leworker:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("leworker", flag.ContinueOnError)
	lease := fs.Duration("lease-duration", 4*time.Second, "LeaseDuration")
	renew := fs.Duration("renew-deadline", 3*time.Second, "RenewDeadline")
	retry := fs.Duration("retry-period", time.Second, "RetryPeriod")
	release := fs.Bool("release-on-cancel", true, "ReleaseOnCancel: give the Lease up when the process is told to stop")
	if err := fs.Parse(args); err != nil {
		return err
	}
	name, ns, lockName := os.Getenv("POD_NAME"), os.Getenv("POD_NAMESPACE"), os.Getenv("LEASE_NAME")
	if name == "" || ns == "" || lockName == "" {
		return errors.New("POD_NAME, POD_NAMESPACE and LEASE_NAME must be set")
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return fmt.Errorf("in-cluster config: %w", err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: lockName, Namespace: ns},
		Client:     kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: name},
	}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: *lease, RenewDeadline: *renew, RetryPeriod: *retry, ReleaseOnCancel: *release,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				fmt.Printf("%s: leading\n", name)
				write(ctx, os.Getenv("LEDGER_URL"), name)
			},
			OnStoppedLeading: func() { fmt.Printf("%s: stopped leading\n", name) },
			OnNewLeader:      func(id string) { fmt.Printf("%s: leader is %s\n", name, id) },
		},
	})
	if err != nil {
		return fmt.Errorf("leader elector: %w", err)
	}
	le.Run(ctx)
	return nil
}

// write POSTs the leader's writes to url/write until ctx ends (nothing when url is "").
func write(ctx context.Context, url, name string) {
	if url == "" {
		<-ctx.Done()
		return
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	body := fmt.Sprintf(`{"writer":%q}`, name)
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/write", strings.NewReader(body))
		if err == nil {
			if resp, err := hc.Do(req); err == nil {
				_ = resp.Body.Close()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
