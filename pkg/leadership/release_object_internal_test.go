package leadership

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// TestLockReplaced: only a refusal naming the lock object's UID says the term is gone.
func TestLockReplaced(t *testing.T) {
	gk := schema.GroupKind{Group: "lockwarden.io", Kind: "DistributedLock"}
	gr := schema.GroupResource{Group: "lockwarden.io", Resource: "distributedlocks"}
	uidInvalid := apierrors.NewInvalid(gk, "leader", field.ErrorList{field.Invalid(field.NewPath("metadata", "uid"), "u1", "field is immutable")})
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"the API server's answer: metadata.uid immutable", uidInvalid, true},
		{"wrapped", fmt.Errorf("leadership: release: %w", uidInvalid), true},
		{"invalid on another field", apierrors.NewInvalid(gk, "leader", field.ErrorList{field.Invalid(field.NewPath("metadata", "annotations"), "x", "bad")}), false},
		{"a UID precondition conflict", apierrors.NewConflict(gr, "leader", errors.New("Precondition failed: UID in precondition: u1, UID in object meta: u2")), true},
		{"an optimistic-lock conflict", apierrors.NewConflict(gr, "leader", errors.New("the object has been modified")), false},
		{"the policy's refusal", apierrors.NewForbidden(gr, "leader", errors.New("lockwarden.io/holder-release refused")), false},
		{"not found", apierrors.NewNotFound(gr, "leader"), false},
		{"not an API status", errors.New("connection reset"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := lockReplaced(tt.err); got != tt.want {
				t.Errorf("lockReplaced(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

// TestReleasePatch: the patch sets the annotation and carries the object's UID.
func TestReleasePatch(t *testing.T) {
	for _, obj := range []string{"u1", ""} {
		b, err := releasePatch("pod/7", types.UID(obj))
		if err != nil {
			t.Fatalf("releasePatch: %v", err)
		}
		var p struct {
			Metadata struct {
				UID         *string           `json:"uid"`
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(b, &p); err != nil {
			t.Fatalf("decode %s: %v", b, err)
		}
		if a := p.Metadata.Annotations[lockv1.AnnotationHolderRelease]; a != "pod/7" || len(p.Metadata.Annotations) != 1 {
			t.Errorf("patch %s: annotations %v, want only the release pod/7", b, p.Metadata.Annotations)
		}
		switch {
		case obj == "" && p.Metadata.UID != nil:
			t.Errorf("patch %s for no object carries a uid", b)
		case obj != "" && (p.Metadata.UID == nil || *p.Metadata.UID != obj):
			t.Errorf("patch %s: uid %v, want %s", b, p.Metadata.UID, obj)
		}
	}
}
