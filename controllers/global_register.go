package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockwarden/lockwarden/pkg/lease"
)

// ClusterIdentityNamespace is the namespace whose UID identifies a cluster in the shared
// etcd (docs/global.md, finding F3): every cluster has it, and no two share its UID.
const ClusterIdentityNamespace = "kube-system"

// RegisterCluster reads this cluster's identity (the kube-system namespace's UID, uncached)
// and registers it in the shared etcd under name, with the prefix of the engine whose
// election fences this manager. A refusal (the name registered by another cluster, or the
// engine prefix by another name: lease.ErrClusterNameTaken) is returned as is: the manager
// must not start.
func RegisterCluster(ctx context.Context, api client.Reader, g *lease.Global, name, enginePrefix string) (lease.ClusterID, error) {
	var ns corev1.Namespace
	if err := api.Get(ctx, client.ObjectKey{Name: ClusterIdentityNamespace}, &ns); err != nil {
		return lease.ClusterID{}, fmt.Errorf("read this cluster's identity (namespace %s): %w", ClusterIdentityNamespace, err)
	}
	if ns.UID == "" {
		return lease.ClusterID{}, fmt.Errorf("read this cluster's identity: namespace %s has no UID", ClusterIdentityNamespace)
	}
	id := lease.ClusterID{Name: name, UID: string(ns.UID)}
	if err := g.Register(ctx, id, enginePrefix); err != nil {
		return lease.ClusterID{}, err
	}
	return id, nil
}
