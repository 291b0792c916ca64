package v1alpha1

// Strategy says how the controller chooses a holder among eligible candidates.
// +kubebuilder:validation:Enum=OldestReady;FirstReady;Preferred
type Strategy string

const (
	// StrategyOldestReady grants the oldest eligible pod by creation time, ties broken by name.
	StrategyOldestReady Strategy = "OldestReady"
	// StrategyFirstReady grants the eligible pod that has been Ready the longest, by the
	// last transition time of its Ready condition (the API server's record), ties broken by
	// name.
	StrategyFirstReady Strategy = "FirstReady"
	// StrategyPreferred grants spec.preferredHolder: at once when the lock has no holder and
	// it is eligible; from another holder once the controller has seen it continuously
	// eligible for the lock delay, ending that holder's term through Releasing and the delay.
	// While the preferred pod is not eligible it behaves as OldestReady.
	StrategyPreferred Strategy = "Preferred"
)

// Defaults applied when a field is unset.
const (
	// DefaultLeaseDurationSeconds is the default of spec.leaseDurationSeconds.
	DefaultLeaseDurationSeconds = 15
	// MinLeaseDurationSeconds is the shortest lease a lock may declare.
	MinLeaseDurationSeconds = 2
	// MaxLeaseDurationSeconds is the longest lease (and lock delay) a lock may declare.
	MaxLeaseDurationSeconds = 3600
	// MaxSlots is the most slots (spec.slots) a lock may declare: every turn of a lock reads
	// and judges each slot, and its status carries each slot's term and history.
	MaxSlots = 16
)

// DistributedLockSpec declares a lock.
//
// +kubebuilder:validation:XValidation:rule="!has(self.lockDelaySeconds) || self.lockDelaySeconds >= self.leaseDurationSeconds",messageExpression="'must be at least leaseDurationSeconds, which is %d%s; got %d'.format([self.leaseDurationSeconds, self.leaseDurationSeconds == 15 ? ' (its default when unset)' : ' (as set)', self.lockDelaySeconds])",fieldPath=".lockDelaySeconds",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="self.strategy != 'Preferred' || has(self.preferredHolder)",message="preferredHolder is required when strategy is Preferred",fieldPath=".preferredHolder",reason=FieldValueRequired
// +kubebuilder:validation:XValidation:rule="!has(self.preferredHolder) || self.strategy == 'Preferred'",message="preferredHolder may be set only when strategy is Preferred",fieldPath=".preferredHolder",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="!has(self.routing) || !has(self.slots) || self.slots == 1",message="routing may be set only on a lock with one slot: a Service routed to the holder needs exactly one holder",fieldPath=".routing",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="self.scope != 'Global' || has(self.globalName)",message="globalName is required when scope is Global: every cluster's lock with that name contends for one grant",fieldPath=".globalName",reason=FieldValueRequired
// +kubebuilder:validation:XValidation:rule="!has(self.globalName) || self.scope == 'Global'",message="globalName may be set only when scope is Global",fieldPath=".globalName",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="!has(self.clusterPreference) || self.scope == 'Global'",message="clusterPreference may be set only when scope is Global",fieldPath=".clusterPreference",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="self.scope != 'Global' || !has(self.slots) || self.slots == 1",message="a Global lock has one slot: slots above 1 are not supported with scope Global",fieldPath=".slots",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="self.scope != 'Global' || !has(self.routing)",message="routing is not supported with scope Global",fieldPath=".routing",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="self.scope != 'Global' || self.leaseDurationSeconds >= 6",messageExpression="'must be at least 6 for a Global lock (its rounds run every third of it and must fit the lock delay); got %d'.format([self.leaseDurationSeconds])",fieldPath=".leaseDurationSeconds",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="self.scope != 'Global' || !has(self.lockDelaySeconds) || self.lockDelaySeconds >= 2 * self.leaseDurationSeconds",messageExpression="'must be at least twice leaseDurationSeconds (%d) for a Global lock, or unset (then it is twice leaseDurationSeconds); got %d'.format([self.leaseDurationSeconds, self.lockDelaySeconds])",fieldPath=".lockDelaySeconds",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="(has(self.scope) ? self.scope : 'Cluster') == (has(oldSelf.scope) ? oldSelf.scope : 'Cluster')",message="scope cannot be changed: create a new lock instead",fieldPath=".scope",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="has(self.globalName) == has(oldSelf.globalName) && (!has(self.globalName) || self.globalName == oldSelf.globalName)",message="globalName cannot be changed: create a new lock instead",fieldPath=".globalName",reason=FieldValueForbidden
type DistributedLockSpec struct {
	// Candidates selects the pods, in the lock's namespace, that may hold the lock.
	// +required
	Candidates Candidates `json:"candidates"`

	// LeaseDurationSeconds is how long a holder may act without confirming that it still
	// holds the lock (its pod re-reads the status at least every third of it). From 2 to
	// 3600; default 15.
	// +kubebuilder:default=15
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=3600
	// +optional
	LeaseDurationSeconds int32 `json:"leaseDurationSeconds,omitempty"`

	// LockDelaySeconds is how long the controller waits, after publishing that a term is
	// ending (phase Releasing), before it grants the lock to another pod. From 2 to 3600 and
	// at least leaseDurationSeconds; unset means equal to leaseDurationSeconds.
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=3600
	// +optional
	LockDelaySeconds *int32 `json:"lockDelaySeconds,omitempty"`

	// Strategy chooses the holder among eligible candidates: OldestReady (the default: the
	// oldest pod), FirstReady (the pod Ready the longest) or Preferred (preferredHolder when
	// it is eligible; requires preferredHolder).
	// +kubebuilder:default=OldestReady
	// +optional
	Strategy Strategy `json:"strategy,omitempty"`

	// PreferredHolder is the name of the pod to prefer (a pod name, at most 253 characters);
	// only with strategy Preferred.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	PreferredHolder string `json:"preferredHolder,omitempty"`

	// Suspend ends the current term (through Releasing and the lock delay) and grants nothing
	// while true. Default false.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// Slots is how many pods may hold the lock at once (a semaphore), from 1 to 16; default 1.
	// Each slot is a term of its own, with its own holder, fencing token and history: slot 0
	// is the status's own fields, slots 1 to N-1 are listed in status.slots. A pod holds at
	// most one slot of a lock. Lowering it ends the highest slots' terms through Releasing
	// and the lock delay; raising it grants the new slots.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	// +optional
	Slots int32 `json:"slots,omitempty"`

	// Routing makes a Service reach only the holder: the controller keeps the EndpointSlice
	// of the named Service listing exactly the holder pod while the lock is Held, and no pod
	// while it is Releasing, Pending or Suspended. Optional.
	// +optional
	Routing *Routing `json:"routing,omitempty"`

	// Scope is Cluster (the default: the lock is granted in this cluster) or Global (every
	// cluster's lock with the same globalName contends for one grant in the etcd that all
	// their managers share; docs/global.md). A Global lock has one slot, no routing, a lease
	// of at least 6 s and a lock delay of at least twice the lease (default: twice). Cannot
	// be changed.
	// +kubebuilder:default=Cluster
	// +optional
	Scope Scope `json:"scope,omitempty"`

	// GlobalName names the grant that the Global locks of every cluster contend for: a
	// DNS-1123 subdomain, at most 253 characters. Required when scope is Global, forbidden
	// otherwise; cannot be changed.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	GlobalName string `json:"globalName,omitempty"`

	// ClusterPreference lists cluster names (each manager's --cluster-name), most preferred
	// first: when the grant is free, a cluster listed earlier that has an eligible candidate
	// leads. Clusters not listed come after, first to grant wins. Only with scope Global; at
	// most 16 names.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +listType=set
	// +optional
	ClusterPreference []string `json:"clusterPreference,omitempty"`
}

// The selector's presence is a rule rather than a required field: a missing required field
// stops the API server before its rules run, and kubectl then prints an extra line about
// unchecked rules.
//
// +kubebuilder:validation:XValidation:rule="has(self.selector)",message="a lock must select its candidate pods, e.g. selector: {matchLabels: {app: my-app}}",fieldPath=".selector",reason=FieldValueRequired

// Candidates selects the pods that may hold a lock.
type Candidates struct {
	// Selector matches candidate pods by label, as a Deployment's selector does. Required, and
	// it must not be empty: a lock that selects every pod in the namespace is almost always a
	// mistake. Keys and values must be valid label keys and values, and operators one of In,
	// NotIn, Exists and DoesNotExist; the API server rejects anything else.
	// +optional
	Selector *LabelSelector `json:"selector"`
}

// EffectiveSlots is spec.slots, or 1 when unset.
func (s *DistributedLockSpec) EffectiveSlots() int32 {
	return max(s.Slots, 1)
}

// EffectiveLockDelaySeconds is spec.lockDelaySeconds, or when unset spec.leaseDurationSeconds
// (twice it for a Global lock).
func (s *DistributedLockSpec) EffectiveLockDelaySeconds() int32 {
	if s.LockDelaySeconds != nil {
		return *s.LockDelaySeconds
	}
	if s.IsGlobal() {
		return GlobalLockDelayFactor * s.LeaseDurationSeconds
	}
	return s.LeaseDurationSeconds
}
