package testenv

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

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

// converterDelay is the text of the API server's refusal while its MutatingAdmissionPolicy
// dispatcher has no type converter for a custom resource's kind yet
// (k8s.io/apiserver pkg/admission/plugin/policy/mutating/dispatcher.go, dispatchOne).
const converterDelay = "There can be a delay between when CustomResourceDefinitions are created and when they are available"

// converterDelayed reports whether err is that refusal: a ServiceUnavailable that stored
// nothing and that the API server itself calls a delay.
func converterDelayed(err error) bool {
	return apierrors.IsServiceUnavailable(err) && strings.Contains(err.Error(), converterDelay)
}

// ConverterDelayText reports whether text (a kubectl's stderr) holds that refusal.
func ConverterDelayText(text string) bool { return strings.Contains(text, converterDelay) }

// RideOutConverterDelay wraps c so that a create refused with the dispatcher's
// converter-delay ServiceUnavailable is sent again, for up to timeout. WaitLockAdmission is not
// enough on its own: a clean-clone CI run refused a fixture's lock with it seconds after
// WaitLockAdmission had returned (TestFailpointLostReleaseReply, "create lock lock: Resource
// kind lockwarden.io/v1alpha1, Kind=DistributedLock not found"). The refusal stores nothing,
// so sending the create again loses nothing; every other error is returned as it came.
func RideOutConverterDelay(c client.WithWatch, timeout time.Duration) client.WithWatch {
	return interceptor.NewClient(c, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			deadline := time.Now().Add(timeout)
			for {
				err := c.Create(ctx, obj, opts...)
				if !converterDelayed(err) || time.Now().After(deadline) || ctx.Err() != nil {
					return err
				}
				time.Sleep(100 * time.Millisecond)
			}
		},
	})
}
