// Package testenv starts a real control plane (kube-apiserver and etcd built into ./bin by
// `make envtest-bins`) with the lockwarden CRD installed, for tests and the playground.
package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// ErrBinariesMissing means kube-apiserver or etcd was not found; `make envtest-bins` builds them.
var ErrBinariesMissing = errors.New("control plane binaries missing")

// Env is a running control plane.
type Env struct {
	// Config reaches the API server as an administrator.
	Config *rest.Config
	// Root is the repository root.
	Root string

	env  *envtest.Environment
	logs []*os.File // closed by Stop
}

// RepoRoot finds the repository root by walking up from the working directory to go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find repository root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "hack", "tools", "go.mod")); err == nil {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find repository root: no go.mod with hack/tools above the working directory")
		}
		dir = parent
	}
}

// AssetsDir is where kube-apiserver and etcd are: $KUBEBUILDER_ASSETS, else <root>/bin. It
// returns ErrBinariesMissing, naming the make target, when either binary is absent.
func AssetsDir(root string) (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		dir = filepath.Join(root, "bin")
	}
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return "", fmt.Errorf("%w: %s not found in %s: run `make envtest-bins`", ErrBinariesMissing, name, dir)
		}
	}
	return dir, nil
}

// Option configures Start.
type Option func(*Env) error

// LogsTo sends kube-apiserver's output to dir/kube-apiserver.log and its etcd's to
// dir/kube-apiserver-etcd.log (by default both are discarded). The files are closed by Stop.
func LogsTo(dir string) Option {
	return func(e *Env) error {
		api, err := os.Create(filepath.Join(dir, "kube-apiserver.log"))
		if err != nil {
			return fmt.Errorf("create API server log: %w", err)
		}
		etcd, err := os.Create(filepath.Join(dir, "kube-apiserver-etcd.log"))
		if err != nil {
			api.Close()
			return fmt.Errorf("create etcd log: %w", err)
		}
		apiServer := e.env.ControlPlane.GetAPIServer()
		apiServer.Out, apiServer.Err = api, api
		e.env.ControlPlane.Etcd = &envtest.Etcd{Out: etcd, Err: etcd}
		e.logs = append(e.logs, api, etcd)
		return nil
	}
}

// Start starts kube-apiserver and etcd from AssetsDir and installs the CRDs of config/crd/bases.
func Start(opts ...Option) (*Env, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	assets, err := AssetsDir(root)
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory:    assets,
		CRDDirectoryPaths:        []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
	}
	e := &Env{Root: root, env: env}
	for _, o := range opts {
		if err := o(e); err != nil {
			e.closeLogs()
			return nil, err
		}
	}
	cfg, err := env.Start()
	if err != nil {
		// envtest leaves the control plane running when a later step (installing the CRDs)
		// fails: stop it, or its processes outlive the caller
		_ = env.Stop()
		e.closeLogs()
		return nil, fmt.Errorf("start control plane from %s: %w", assets, err)
	}
	e.Config = cfg
	return e, nil
}

// Kubeconfig writes a kubeconfig for an administrator of this control plane to path.
func (e *Env) Kubeconfig(path string) error {
	user, err := e.env.ControlPlane.AddUser(envtest.User{Name: "lockwarden-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("add kubeconfig user: %w", err)
	}
	data, err := user.KubeConfig()
	if err != nil {
		return fmt.Errorf("render kubeconfig: %w", err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}

// Kubectl is the path of ./bin/kubectl (built by `make envtest-bins`).
func (e *Env) Kubectl() (string, error) {
	p := filepath.Join(e.Root, "bin", "kubectl")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%w: %s not found: run `make envtest-bins`", ErrBinariesMissing, p)
	}
	return p, nil
}

// Stop stops the control plane.
func (e *Env) Stop() error {
	defer e.closeLogs()
	if err := e.env.Stop(); err != nil {
		return fmt.Errorf("stop control plane: %w", err)
	}
	return nil
}

func (e *Env) closeLogs() {
	for _, f := range e.logs {
		_ = f.Close()
	}
	e.logs = nil
}
