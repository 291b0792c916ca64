package v1alpha1

// Routing names the Service that reaches the holder.
type Routing struct {
	// Service is the name of a Service without a selector in the lock's namespace. The
	// controller manages one EndpointSlice for it (label endpointslice.kubernetes.io/managed-by:
	// lockwarden.io), with the Service's ports resolved against the holder pod's container
	// ports. Established connections to a former holder are not cut.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	// +required
	Service string `json:"service"`
}

// Event reasons of leader-only routing (spec.routing).
const (
	// ReasonRouted: the Service's EndpointSlice now lists the holder.
	ReasonRouted = "Routed"
	// ReasonUnrouted: the Service's EndpointSlice now lists no pod.
	ReasonUnrouted = "Unrouted"
	// ReasonRoutingFailed: the Service cannot be routed (absent, has a selector) or a write of
	// its EndpointSlice failed; the next turn tries again.
	ReasonRoutingFailed = "RoutingFailed"
)
