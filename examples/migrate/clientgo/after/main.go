// Command reporter is a singleton: while it leads, it writes the number of pods in its
// namespace into the ConfigMap "inventory" every 10 seconds. It leads while lockwarden's
// controller grants this pod the DistributedLock "inventory-reporter", and stamps each report
// with the term's fencing token and the term's writer ID: a writer whose token is lower
// than the one on the ConfigMap is refused, so an ex-leader that wakes up after a pause cannot
// overwrite the new report; and a writer with the same token that another writer (this pod's
// previous container, or this process's earlier term of the token) wrote first has lost the
// term.
//
// Environment: POD_UID, POD_NAME and POD_NAMESPACE (downward API); in-cluster config. This is
// the after-program of docs/migration.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
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
	"k8s.io/klog/v2"

	"github.com/lockwarden/lockwarden/pkg/leadership"
)

const (
	lockName   = "inventory-reporter"
	reportName = "inventory"
	interval   = 10 * time.Second

	// tokenAnnotation holds the fencing token of the last write to the report, and
	// fenceAnnotation the writer ID (pod UID and term incarnation) that first wrote it.
	tokenAnnotation = "example.com/fencing-token"
	fenceAnnotation = "example.com/fencing-writer"
)

// Sentinels of report.
var (
	errStale       = errors.New("a writer with a newer fencing token wrote the report")
	errOtherWriter = errors.New("another process wrote the report with this token first")
	errNotLeading  = errors.New("not leading")
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

	// The controller picks the holder among the pods the DistributedLock selects and names it
	// by UID: Identity defaults to $POD_UID, Name (for logs) to $POD_NAME. Lease timings live
	// in the DistributedLock's spec, not here.
	var el *leadership.Elector
	el, err = leadership.New(leadership.Config{
		Config:    cfg,
		Namespace: ns,
		Lock:      lockName,
		// client-go's contract: Run returns once the first term has ended. Without it the
		// elector re-campaigns: Run leads term after term until ctx ends.
		SingleTerm: true,
		// Like ReleaseOnCancel: OnStartedLeading runs the work and returns once it stopped,
		// so the next candidate may be granted without waiting for the lock delay.
		ReleaseOnStop: true,
		Callbacks: leadership.Callbacks{
			OnStartedLeading: func(ctx context.Context, token int64) {
				// ctx is cancelled when the term ends; it can be noticed late after a pause,
				// so report checks Valid() right before writing and carries the token and
				// the term's writer ID (each term has its own: read it once, from ctx).
				writer := leadership.WriterOf(ctx)
				ticker := time.NewTicker(interval)
				defer ticker.Stop()
				for {
					err := report(ctx, client, ns, id, writer, token, el.Valid)
					if errors.Is(err, errOtherWriter) {
						el.Abandon(token) // the term is over for this process: no release, never again
					}
					if errors.Is(err, errStale) || errors.Is(err, errOtherWriter) || errors.Is(err, errNotLeading) {
						return
					}
					if err != nil {
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
				// Do not exit here: Run sends the release after this returns.
				klog.InfoS("stopped leading", "pod", id)
			},
			OnNewHolder: func(holder string, token int64) {
				klog.InfoS("new holder", "pod", holder, "token", token)
			},
		},
	})
	if err != nil {
		klog.Fatalf("configure leadership: %v", err)
	}

	// The readiness probe fails while this pod cannot confirm its lock (never because it does
	// not lead), which takes it out of the candidates.
	go serveProbes(el)
	if err := el.Run(ctx); err != nil {
		klog.Fatalf("lead %s: %v", lockName, err)
	}
	// The term ended: exit, and the kubelet restarts the container, as before.
}

// serveProbes serves /readyz and /healthz on :8081.
func serveProbes(el *leadership.Elector) {
	mux := http.NewServeMux()
	for path, check := range map[string]func(*http.Request) error{"/readyz": el.ReadyzCheck, "/healthz": el.LivezCheck} {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			if err := check(r); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
		})
	}
	srv := &http.Server{Addr: ":8081", Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	klog.ErrorS(srv.ListenAndServe(), "serve probes")
}

// report writes the number of pods in ns into the ConfigMap reportName, fenced by token and
// the writer ID fencer.
func report(ctx context.Context, client kubernetes.Interface, ns, writer, fencer string, token int64, valid func() bool) error {
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list pods: %w", err)
	}
	data := map[string]string{"pods": strconv.Itoa(len(pods.Items)), "writer": writer}
	stamp := map[string]string{tokenAnnotation: strconv.FormatInt(token, 10), fenceAnnotation: fencer}

	cms := client.CoreV1().ConfigMaps(ns)
	cm, err := cms.Get(ctx, reportName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if !valid() {
			return errNotLeading
		}
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: reportName, Annotations: stamp}, Data: data}
		if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create configmap %s: %w", reportName, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("get configmap %s: %w", reportName, err)
	}
	if err := admit(cm, token, fencer); err != nil {
		return err
	}
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[tokenAnnotation] = stamp[tokenAnnotation]
	cm.Annotations[fenceAnnotation] = fencer
	cm.Data = data
	// The Update carries the resourceVersion read above: if anyone wrote in between it fails
	// with a conflict, so admit's check and this write are one compare-and-swap.
	if !valid() {
		return errNotLeading
	}
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update configmap %s: %w", reportName, err)
	}
	return nil
}

// admit refuses token when cm was last written with a higher one, or with the same one by
// another writer: fence < token, or fence = token from this writer.
func admit(cm *corev1.ConfigMap, token int64, writer string) error {
	v, ok := cm.Annotations[tokenAnnotation]
	if !ok {
		return nil
	}
	last, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return fmt.Errorf("parse annotation %s=%q: %w", tokenAnnotation, v, err)
	}
	switch {
	case last > token:
		return fmt.Errorf("%w: token %d, report written with %d", errStale, token, last)
	case last == token && cm.Annotations[fenceAnnotation] != writer:
		return fmt.Errorf("%w: token %d, written by %s", errOtherWriter, token, cm.Annotations[fenceAnnotation])
	}
	return nil
}
