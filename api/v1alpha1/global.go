package v1alpha1

// Scope says where a lock's term is decided: in this cluster, or across every cluster whose
// lock has the same spec.globalName (docs/global.md).
// +kubebuilder:validation:Enum=Cluster;Global
type Scope string

const (
	// ScopeCluster is the default: the lock is granted among this cluster's candidates, by this
	// cluster's manager, with tokens from its own etcd keys.
	ScopeCluster Scope = "Cluster"
	// ScopeGlobal makes the lock one of several, one per cluster, that contend for a single
	// grant in an etcd shared by every cluster's manager: at most one cluster holds the term,
	// and its token is that etcd's revision, ordered across clusters.
	ScopeGlobal Scope = "Global"
)

// Limits and defaults of global locks (docs/global.md, "Defaults").
const (
	// MinGlobalLeaseDurationSeconds is the shortest lease a global lock may declare: below it
	// the rule's latency budget (D > 2P + 2Q + m + 3ℓ at D = 2L) is under 0.2 s.
	MinGlobalLeaseDurationSeconds = 6
	// GlobalLockDelayFactor is the default lock delay of a global lock, in leases (D = 2L).
	GlobalLockDelayFactor = 2
	// MaxClusterPreference is the most clusters spec.clusterPreference may list.
	MaxClusterPreference = 16
)

// IsGlobal reports whether the lock is scope Global.
func (s *DistributedLockSpec) IsGlobal() bool { return s.Scope == ScopeGlobal }
