package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The transition rules below sit on the root of the schema because a field-level rule is
// skipped when the new object omits the field: an update with no status at all must still be
// refused when it would lower or remove maxFencingToken or controllerEpoch. (This comment is
// kept apart from the type's doc comment, which is the kind's description in kubectl explain.)
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=dlock,categories=lockwarden
// +kubebuilder:printcolumn:name="Holder",type=string,JSONPath=`.status.holder`
// +kubebuilder:printcolumn:name="Token",type=integer,JSONPath=`.status.fencingToken`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Slots",type=string,JSONPath=`.status.slotsHeld`
// +kubebuilder:printcolumn:name="Candidates",type=integer,JSONPath=`.status.eligibleCandidates`
// +kubebuilder:printcolumn:name="Strategy",type=string,JSONPath=`.spec.strategy`,priority=1
// +kubebuilder:printcolumn:name="Lease",type=integer,JSONPath=`.spec.leaseDurationSeconds`,priority=1
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Held")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="(has(self.status) && has(self.status.maxFencingToken) ? self.status.maxFencingToken : 0) >= (has(oldSelf.status) && has(oldSelf.status.maxFencingToken) ? oldSelf.status.maxFencingToken : 0)",message="status.maxFencingToken may not decrease or be removed",fieldPath=".status.maxFencingToken",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="(has(self.status) && has(self.status.removedSlotsMaxFencingToken) ? self.status.removedSlotsMaxFencingToken : 0) >= (has(oldSelf.status) && has(oldSelf.status.removedSlotsMaxFencingToken) ? oldSelf.status.removedSlotsMaxFencingToken : 0)",message="status.removedSlotsMaxFencingToken may not decrease or be removed",fieldPath=".status.removedSlotsMaxFencingToken",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="(has(self.status) && has(self.status.globalRound) ? self.status.globalRound : 0) >= (has(oldSelf.status) && has(oldSelf.status.globalRound) ? oldSelf.status.globalRound : 0)",message="status.globalRound may not decrease or be removed",fieldPath=".status.globalRound",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="(has(self.status) && has(self.status.globalRound) ? self.status.globalRound : 0) <= (has(oldSelf.status) && has(oldSelf.status.globalRound) ? oldSelf.status.globalRound : 0) + 1",message="status.globalRound may step by 1 only",fieldPath=".status.globalRound",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="(has(self.status) && has(self.status.globalToken) ? self.status.globalToken : 0) == (has(oldSelf.status) && has(oldSelf.status.globalToken) ? oldSelf.status.globalToken : 0) || (has(self.status) && has(self.status.globalRound) ? self.status.globalRound : 0) == (has(oldSelf.status) && has(oldSelf.status.globalRound) ? oldSelf.status.globalRound : 0) + 1",message="status.globalToken may change only in a write that steps status.globalRound by 1",fieldPath=".status.globalToken",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="(has(self.status) && has(self.status.globalLockDelaySeconds) ? self.status.globalLockDelaySeconds : 0) == (has(oldSelf.status) && has(oldSelf.status.globalLockDelaySeconds) ? oldSelf.status.globalLockDelaySeconds : 0) || (has(self.status) && has(self.status.globalToken) ? self.status.globalToken : 0) != (has(oldSelf.status) && has(oldSelf.status.globalToken) ? oldSelf.status.globalToken : 0)",message="status.globalLockDelaySeconds may change only with status.globalToken",fieldPath=".status.globalLockDelaySeconds",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="!has(self.status) || has(self.status.globalRound) == has(self.status.globalToken)",message="status.globalRound and status.globalToken are set together",fieldPath=".status.globalToken",reason=FieldValueRequired
// +kubebuilder:validation:XValidation:rule="!has(self.status) || !has(self.status.globalRound) || self.spec.scope == 'Global'",message="status.globalRound is for Global locks only",fieldPath=".status.globalRound",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="!has(self.status) || !has(self.status.holderUID) || self.spec.scope != 'Global'",message="a Global lock publishes its holder in status.globalHolderUID, never status.holderUID",fieldPath=".status.holderUID",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="(has(self.status) && has(self.status.controllerEpoch) ? self.status.controllerEpoch : 0) >= (has(oldSelf.status) && has(oldSelf.status.controllerEpoch) ? oldSelf.status.controllerEpoch : 0)",message="status.controllerEpoch may not decrease or be removed",fieldPath=".status.controllerEpoch",reason=FieldValueForbidden

// DistributedLock declares a lock and the pods that may hold it. The controller grants it to
// one eligible candidate at a time and publishes the holder with a fencing token that
// strictly increases across grants: the holder passes the token to every resource it writes,
// so that a paused former holder can never overwrite the new one.
type DistributedLock struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec declares the lock: its candidates, timing and how a holder is chosen.
	// +required
	Spec DistributedLockSpec `json:"spec"`

	// Status is written by the controller only.
	// +optional
	Status DistributedLockStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// DistributedLockList is a list of DistributedLocks.
type DistributedLockList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []DistributedLock `json:"items"`
}
