package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/internal/testenv"
)

// The payments workers run as a real pod identity: the service account "worker" bound to
// the shipped lockwarden-lock-reader role, each with a token bound to its pod (what the
// kubelet projects into a pod), and the shipped admission policy installed. So their
// holder-confirmed release (fenced-worker's default --release-on-stop) goes through the same checks as
// on a cluster: only the holder pod's own token may release its term.
const workerSA = "worker"

// installIdentity installs config/rbac/lock_reader_role.yaml and config/policy, waits until
// a lock is admitted, and installs the worker service account bound to the role in ns.
func (p *playground) installIdentity(ctx context.Context) error {
	if err := p.env.Apply(ctx, p.k8s, "config/rbac/lock_reader_role.yaml", "config/policy"); err != nil {
		return err
	}
	// Right after config/policy the API server refuses a lock for a moment with
	// ServiceUnavailable "Resource kind ... not found" (its policy dispatcher is not ready).
	if err := testenv.WaitLockAdmission(ctx, p.k8s, 30*time.Second); err != nil {
		return err
	}
	p.k8s = testenv.RideOutConverterDelay(p.k8s, 30*time.Second)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: workerSA, Namespace: ns}}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "worker-lock-reader", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "lockwarden-lock-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: workerSA, Namespace: ns}},
	}
	if err := p.k8s.Create(ctx, sa); err != nil {
		return fmt.Errorf("create service account %s: %w", workerSA, err)
	}
	if err := p.k8s.Create(ctx, rb); err != nil {
		return fmt.Errorf("create role binding: %w", err)
	}
	return nil
}

// podKubeconfig writes a kubeconfig that authenticates with a token bound to pod.
func (p *playground) podKubeconfig(ctx context.Context, pod *corev1.Pod) (string, error) {
	cfg, err := p.env.PodConfig(ctx, pod)
	if err != nil {
		return "", err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["playground"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData, CertificateAuthority: cfg.CAFile}
	kc.AuthInfos[pod.Name] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts[pod.Name] = &clientcmdapi.Context{Cluster: "playground", AuthInfo: pod.Name, Namespace: ns}
	kc.CurrentContext = pod.Name
	path := filepath.Join(p.dir, "kubeconfig-"+pod.Name)
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return "", fmt.Errorf("write kubeconfig of %s: %w", pod.Name, err)
	}
	return path, nil
}

// routeService creates the selector-less Service payments-primary and routes the lock to
// it (spec.routing): its EndpointSlice lists exactly the holder.
func (p *playground) routeService(ctx context.Context) error {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: routedService, Namespace: ns},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
	if err := p.k8s.Create(ctx, svc); err != nil {
		return fmt.Errorf("create Service %s: %w", routedService, err)
	}
	var l lockv1.DistributedLock
	if err := p.k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: lock}, &l); err != nil {
		return fmt.Errorf("get lock %s: %w", lock, err)
	}
	l.Spec.Routing = &lockv1.Routing{Service: routedService}
	if err := p.k8s.Update(ctx, &l); err != nil {
		return fmt.Errorf("route lock %s to Service %s: %w", lock, routedService, err)
	}
	return nil
}

const routedService = "payments-primary"
