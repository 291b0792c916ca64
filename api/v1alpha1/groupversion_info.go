// Package v1alpha1 holds the DistributedLock API (group lockwarden.io, version v1alpha1).
//
// A DistributedLock declares a lock and its candidate pods. The controller picks a holder,
// records the grant in etcd and publishes holder and fencing token in the status. Validation
// lives in the CRD schema (OpenAPI and CEL), so the API server rejects an invalid spec with a
// message naming the field, and refuses any status update that lowers or removes
// status.maxFencingToken or status.controllerEpoch.
//
// +kubebuilder:object:generate=true
// +groupName=lockwarden.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of every type in this package.
	GroupVersion = schema.GroupVersion{Group: "lockwarden.io", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &DistributedLock{}, &DistributedLockList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
