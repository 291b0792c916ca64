package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/lockwarden/lockwarden/pkg/leadership"
)

// restConfig is --kubeconfig when set, else the in-cluster config, else $KUBECONFIG and the
// default loading rules.
func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("load --kubeconfig %s: %w", kubeconfig, err)
		}
		return cfg, nil
	}
	if cfg, err := rest.InClusterConfig(); err == nil {
		return cfg, nil
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: no in-cluster config and no usable $KUBECONFIG: %w", err)
	}
	return cfg, nil
}

// newElector is the pod's elector for c, with stopBudget, release on stop and callbacks.
func newElector(c common, stopBudget time.Duration, release bool, log logr.Logger, cbs leadership.Callbacks) (*leadership.Elector, error) {
	cfg, err := restConfig(c.kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = rest.DefaultKubernetesUserAgent() + " lockwarden-agent"
	el, err := leadership.New(leadership.Config{
		Config: cfg, Namespace: c.namespace, Lock: c.lock,
		Identity: types.UID(c.identity), Name: c.name,
		Margin: c.margin, StopBudget: stopBudget, ReleaseOnStop: release, Log: log, Callbacks: cbs,
	})
	if err != nil {
		return nil, fmt.Errorf("create elector: %w", err)
	}
	return el, nil
}

// newLogger writes one line per entry to w, with a wall-clock time.
func newLogger(w io.Writer) logr.Logger {
	var mu sync.Mutex
	return funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, "%s lockwarden-agent %s\n", time.Now().Format("15:04:05.000"), args)
	}, funcr.Options{Verbosity: 0})
}

// server is an HTTP server on a listener it owns, stopped by close.
type server struct {
	srv    *http.Server
	served chan struct{}
}

// serve listens on addr and serves h; request contexts derive from ctx, so long-lived
// handlers (/watch) end when ctx does.
func serve(ctx context.Context, addr string, h http.Handler) (*server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	s := &server{
		srv: &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second,
			BaseContext: func(net.Listener) context.Context { return ctx }},
		served: make(chan struct{}),
	}
	go func() {
		defer close(s.served)
		_ = s.srv.Serve(ln) // http.ErrServerClosed after close
	}()
	return s, nil
}

// close stops the server and waits until it has stopped serving.
func (s *server) close() {
	_ = s.srv.Close()
	<-s.served
}

// readyzHandler answers 200 while check passes, else 503 with its error.
func readyzHandler(check func(*http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := check(r); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	}
}

// healthz answers 200: the process serves.
func healthz(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") }

// runElector runs el until ctx ends; it returns Run's error.
func runElector(ctx context.Context, el *leadership.Elector) error {
	if err := el.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("run elector: %w", err)
	}
	return nil
}
