package testenv

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// WaitLockAdmission waits until the API server admits a DistributedLock, by a server-side dry
// run that stores nothing (hack/wait-lock-admission.sh does the same for make deploy). Right
// after config/policy is applied a create can be refused for a few seconds with
// ServiceUnavailable "Resource kind lockwarden.io/v1alpha1, Kind=DistributedLock not found":
// the MutatingAdmissionPolicy dispatcher has no type converter for the kind yet
// (k8s.io/apiserver pkg/admission/plugin/policy/mutating/dispatcher.go), whatever the
// policy's failurePolicy says.
func WaitLockAdmission(ctx context.Context, c client.Client, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		probe := &lockv1.DistributedLock{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "admission-probe-", Namespace: "default"},
			Spec: lockv1.DistributedLockSpec{Candidates: lockv1.Candidates{
				Selector: lockv1.MatchLabels(map[string]string{"app": "admission-probe"}),
			}},
		}
		err := c.Create(ctx, probe, client.DryRunAll)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("a DistributedLock is still refused %v after config/policy was applied (a server-side dry run): %w", timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
