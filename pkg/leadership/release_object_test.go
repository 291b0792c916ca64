package leadership_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// TestReleasePatchUIDPrecondition: what the elector's release relies on, on the real API
// server with the shipped admission policy and the holder pod's own token. A JSON merge patch
// that carries metadata.uid is admitted on the object of that UID (the policy sees nothing
// changed but the annotation), and refused, changing nothing, by an object of the same name
// and another UID (the lock deleted and created again): 422 Invalid, "metadata.uid: field is
// immutable" (the API server checks the patched object against the stored one; a merge patch
// carries no precondition of its own, so the answer is not 409 Conflict), which lockReplaced
// recognises.
func TestReleasePatchUIDPrecondition(t *testing.T) {
	ns := namespace(t)
	key := createLock(t, ns, "leader", 6)
	pod, cfg := podIdentity(t, ns) // installs the policy
	waitPolicy(t, key)
	pc := podClient(t, cfg)
	value := lockv1.HolderReleaseValue(pod.UID, 5)
	patch := func(uid types.UID) error {
		body, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"uid":         uid,
			"annotations": map[string]string{lockv1.AnnotationHolderRelease: value},
		}})
		if err != nil {
			t.Fatalf("encode: %v", err)
		}
		l := &lockv1.DistributedLock{}
		l.Namespace, l.Name = key.Namespace, key.Name
		return pc.Patch(t.Context(), l, client.RawPatch(types.MergePatchType, body))
	}
	get := func() *lockv1.DistributedLock {
		l := &lockv1.DistributedLock{}
		if err := k8s.Get(t.Context(), key, l); err != nil {
			t.Fatalf("get lock: %v", err)
		}
		return l
	}
	setStatus(t, key, held(pod.Name, pod.UID, 5, 6))
	first := get()
	if err := patch(first.UID); err != nil {
		t.Fatalf("the holder's release with the object's own UID: %v, want it admitted", err)
	}
	if a := get().Annotations[lockv1.AnnotationHolderRelease]; a != value {
		t.Fatalf("annotation after the release with the object's UID = %q, want %q", a, value)
	}
	deleteLock(t, key)
	createLock(t, ns, "leader", 6)
	setStatus(t, key, held(pod.Name, pod.UID, 5, 6)) // the new object's term of the same number
	second := get()
	err := patch(first.UID)
	if !apierrors.IsInvalid(err) || !uidCause(err) {
		t.Fatalf("patch of object %s with the deleted object's UID %s = %v (reason %q), want 422 Invalid with a cause on metadata.uid", second.UID, first.UID, err, apierrors.ReasonForError(err))
	}
	t.Logf("refusal: %v", err)
	if a, ok := get().Annotations[lockv1.AnnotationHolderRelease]; ok {
		t.Errorf("the refused patch changed the new object: annotation %q", a)
	}
}

// uidCause reports whether err's status names metadata.uid as a cause.
func uidCause(err error) bool {
	var st apierrors.APIStatus
	if !errors.As(err, &st) || st.Status().Details == nil {
		return false
	}
	for _, c := range st.Status().Details.Causes {
		if c.Field == "metadata.uid" {
			return true
		}
	}
	return false
}

// deleteLock deletes the lock at key and waits until it is gone. The test environment's
// admission policy adds the finalizer lockwarden.io/release once in force (config/policy), and
// no controller runs here to remove it: it is dropped as the controller would once the term's
// etcd grant is gone.
func deleteLock(t *testing.T, key client.ObjectKey) {
	t.Helper()
	l := &lockv1.DistributedLock{}
	if err := k8s.Get(t.Context(), key, l); err != nil {
		t.Fatalf("get lock: %v", err)
	}
	if err := k8s.Delete(t.Context(), l); err != nil {
		t.Fatalf("delete lock: %v", err)
	}
	if err := k8s.Get(t.Context(), key, l); err == nil && len(l.Finalizers) > 0 {
		l.Finalizers = nil
		if err := k8s.Update(t.Context(), l); err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("remove the finalizer: %v", err)
		}
	}
	eventually(t, 10*time.Second, func() bool {
		return apierrors.IsNotFound(k8s.Get(t.Context(), key, &lockv1.DistributedLock{}))
	}, func() string { return "the lock is not gone" })
}
