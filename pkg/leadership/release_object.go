package leadership

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// A release is bound to the lock object it was decided on. The lock's name is not enough:
// a lock deleted and created again under its name is another object, whose term of the same
// number may be another lineage's grant to this pod (lineage.go), and a release queued for
// the old object (behind OnStoppedLeading, or sent after a check of the lock) would end it
// (HolderReleased). So the merge patch carries the object's UID in metadata.uid. The API
// server applies a patch to the object it finds under the name and checks the result
// against the stored object: the same UID changes nothing (the admission policy,
// config/policy, sees metadata unchanged but the annotation), another is refused as a change
// of an immutable field, 422 Invalid with a cause on metadata.uid, before admission and
// without writing anything (TestReleasePatchUIDPrecondition checks this on the real API
// server).

// releasePatch is the JSON merge patch that sets the holder-release annotation to value on the
// lock object obj (no metadata.uid when obj is empty).
func releasePatch(value string, obj types.UID) ([]byte, error) {
	meta := map[string]any{"annotations": map[string]string{lockv1.AnnotationHolderRelease: value}}
	if obj != "" {
		meta["uid"] = obj
	}
	return json.Marshal(map[string]any{"metadata": meta})
}

// lockReplaced reports whether err refuses a release patch because the lock under its name is
// another object than the UID the patch carries: 422 Invalid with a cause on metadata.uid
// (what the API server answers), or 409 Conflict naming a UID precondition (what it answers
// to an update or delete precondition, should a patch ever get one).
func lockReplaced(err error) bool {
	var st apierrors.APIStatus
	if err == nil || !errors.As(err, &st) {
		return false
	}
	s := st.Status()
	switch s.Code {
	case http.StatusUnprocessableEntity:
		if s.Details == nil {
			return false
		}
		for _, c := range s.Details.Causes {
			if c.Field == "metadata.uid" {
				return true
			}
		}
	case http.StatusConflict:
		return strings.Contains(s.Message, "UID in precondition")
	}
	return false
}
