package testenv

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// Scheme returns client-go's types plus the DistributedLock API.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, lockv1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("build scheme: %w", err)
		}
	}
	return s, nil
}

// Client returns an uncached client of the control plane (every read goes to the API
// server), with Scheme, that can also watch.
func (e *Env) Client() (client.WithWatch, error) {
	s, err := Scheme()
	if err != nil {
		return nil, err
	}
	c, err := client.NewWithWatch(e.Config, client.Options{Scheme: s})
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return c, nil
}
