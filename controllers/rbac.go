package controllers

// The permissions the manager needs, generated into config/rbac by `make manifests`. The
// election runs in etcd, so no coordination.k8s.io access is needed.

// +kubebuilder:rbac:groups=lockwarden.io,resources=distributedlocks,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=lockwarden.io,resources=distributedlocks/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=lockwarden.io,resources=distributedlocks/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Leader-only routing (spec.routing): the Service is read for its ports; only the
// EndpointSlices the controller manages are written.
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch;create;update;delete

// With --watch-namespaces the manager reads the finalizer policy's bindings at start
// (finalizer_scope.go).
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingadmissionpolicies;mutatingadmissionpolicybindings,verbs=get;list

// With --cluster-name the manager reads the kube-system namespace's UID at start, the
// cluster's identity among the clusters that share Global locks (global_register.go).
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get
