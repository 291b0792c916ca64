package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// HelmTemplate renders charts/lockwarden with ./bin/helm (make helm) as release lockwarden in
// lockwarden-system, with args added, under the Helm home home (a directory of the caller's:
// no user's Helm configuration, cache or plugins). On a failed render the output is Helm's
// stderr.
func HelmTemplate(home string, args ...string) ([]byte, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	helm := filepath.Join(root, "bin", "helm")
	if _, err := os.Stat(helm); err != nil {
		return nil, fmt.Errorf("%s not found: run `make helm`", helm)
	}
	cmd := exec.Command(helm, append([]string{"template", "lockwarden", filepath.Join(root, "charts", "lockwarden"), "--namespace", "lockwarden-system"}, args...)...)
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.Stderr, err
	}
	return out, err
}
