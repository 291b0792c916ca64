package main

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// ErrNoCRD means the API server does not serve lockwarden.io/v1alpha1 DistributedLocks.
var ErrNoCRD = errors.New("the DistributedLock API (lockwarden.io/v1alpha1) is not installed in this cluster: install its CRD first (kubectl apply -k config/crd, or make deploy)")

// session is a connection to one cluster with the namespace the flags name.
type session struct {
	c         client.Client // uncached: every read goes to the API server
	namespace string        // -n, else the kubeconfig context's, else "default"
	all       bool          // -A
}

// connect builds the client from kubectl's flags.
func (o *options) connect() (*session, error) {
	cfg, err := o.config.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	ns, _, err := o.config.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, fmt.Errorf("read namespace from kubeconfig: %w", err)
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, lockv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, fmt.Errorf("build scheme: %w", err)
		}
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", cfg.Host, err)
	}
	return &session{c: c, namespace: ns, all: o.allNamespaces}, nil
}

// getLock reads one lock from the API server.
func (s *session) getLock(ctx context.Context, name string) (*lockv1.DistributedLock, error) {
	var l lockv1.DistributedLock
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: s.namespace, Name: name}, &l); err != nil {
		return nil, fmt.Errorf("get lock %s/%s: %w", s.namespace, name, explainAPIError(err, s.namespace))
	}
	return &l, nil
}

// listLocks lists the locks of the namespace, or of all namespaces with -A.
func (s *session) listLocks(ctx context.Context) ([]lockv1.DistributedLock, error) {
	var list lockv1.DistributedLockList
	var opts []client.ListOption
	where := "all namespaces"
	if !s.all {
		opts, where = append(opts, client.InNamespace(s.namespace)), "namespace "+s.namespace
	}
	if err := s.c.List(ctx, &list, opts...); err != nil {
		return nil, fmt.Errorf("list locks in %s: %w", where, explainAPIError(err, s.namespace))
	}
	return list.Items, nil
}

// explainAPIError adds what the user can do to the API server's errors that have a fixed
// cause; others are returned as they are.
func explainAPIError(err error, ns string) error {
	switch {
	case meta.IsNoMatchError(err):
		return ErrNoCRD
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%w (kubectl dlock get -n %s lists the locks there)", err, ns)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("%w (no permission: your user needs this verb on distributedlocks.lockwarden.io, or on pods for why)", err)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("%w (the kubeconfig's credentials were not accepted)", err)
	}
	return err
}
