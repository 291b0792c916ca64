package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Apply creates (or replaces) every object of the YAML files at paths (relative to the
// repository root; a directory means its *.yaml files but kustomization.yaml), as the
// administrator. It is how tests install config/policy and config/rbac objects.
func (e *Env) Apply(ctx context.Context, c client.Client, paths ...string) error {
	var files []string
	for _, p := range paths {
		full := filepath.Join(e.Root, p)
		st, err := os.Stat(full)
		if err != nil {
			return fmt.Errorf("apply %s: %w", p, err)
		}
		if !st.IsDir() {
			files = append(files, full)
			continue
		}
		matches, err := filepath.Glob(filepath.Join(full, "*.yaml"))
		if err != nil {
			return fmt.Errorf("apply %s: %w", p, err)
		}
		for _, m := range matches {
			if filepath.Base(m) != "kustomization.yaml" {
				files = append(files, m)
			}
		}
	}
	for _, f := range files {
		if err := applyFile(ctx, c, f); err != nil {
			return err
		}
	}
	return nil
}

func applyFile(ctx context.Context, c client.Client, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("apply %s: %w", path, err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("apply %s: decode: %w", path, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		err := c.Create(ctx, &u)
		if apierrors.IsAlreadyExists(err) {
			var cur unstructured.Unstructured
			cur.SetGroupVersionKind(u.GroupVersionKind())
			if err = c.Get(ctx, client.ObjectKeyFromObject(&u), &cur); err == nil {
				u.SetResourceVersion(cur.GetResourceVersion())
				err = c.Update(ctx, &u)
			}
		}
		if err != nil {
			return fmt.Errorf("apply %s %s from %s: %w", u.GetKind(), u.GetName(), path, err)
		}
	}
}

// PodConfig returns a rest.Config that authenticates as the pod's service account with a
// token bound to the pod (a TokenRequest whose BoundObjectRef is the Pod, as the kubelet
// requests for a projected service-account token), so the API server puts the pod's name and
// UID in the requester's userInfo.extra. The pod must exist and name the service account in
// spec.serviceAccountName.
func (e *Env) PodConfig(ctx context.Context, pod *corev1.Pod) (*rest.Config, error) {
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		return nil, fmt.Errorf("pod token: %w", err)
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To[int64](3600),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	tr, err := cs.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, pod.Spec.ServiceAccountName, req, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("request a token for pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	cfg := rest.AnonymousClientConfig(e.Config)
	cfg.BearerToken = tr.Status.Token
	return cfg, nil
}
