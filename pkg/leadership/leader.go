package leadership

import (
	"k8s.io/apimachinery/pkg/types"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// leaderView is the holder an accepted observation showed with phase Held.
type leaderView struct {
	name string
	uid  types.UID
}

// heldBy is the holder the status shows, or nil when its phase is not Held or it names no
// holder.
func heldBy(st *lockv1.DistributedLockStatus) *leaderView {
	if st.Phase != lockv1.PhaseHeld || st.HolderUID == "" {
		return nil
	}
	return &leaderView{name: st.Holder, uid: st.HolderUID}
}

// setLeader records the holder of the newest accepted observation, for GetLeader.
func (e *Elector) setLeader(st *lockv1.DistributedLockStatus) { e.leader.Store(heldBy(st)) }

// GetLeader returns the holder of the lock as the newest accepted observation (a consistent
// read or a watch event) shows it: status.holder, the holder pod's name, when that
// observation's phase is Held, and "" otherwise (Free, Releasing, no lock, or nothing observed
// yet). Like Callbacks.OnNewHolder it may come from a watch event that no read has confirmed,
// so it is informational: whether this pod leads is Valid(). It is client-go's
// LeaderElector.GetLeader, except that client-go returns the holder's identity and this
// returns the pod name (the identity is GetLeaderUID). For a Global lock whose term another
// cluster holds it is "" (no pod of this cluster holds it). After Run returns it keeps the
// last observation. Safe for concurrent use.
func (e *Elector) GetLeader() string {
	if v := e.leader.Load(); v != nil {
		return v.name
	}
	return ""
}

// GetLeaderUID returns the holder's UID (status.holderUID; status.globalHolderUID for a Global
// lock) of the same observation as GetLeader, or "" when GetLeader is "". Compare it with
// Config.Identity to tell this pod, but decide on Valid(): a holder seen on a watch event is
// not yet a term.
func (e *Elector) GetLeaderUID() types.UID {
	if v := e.leader.Load(); v != nil {
		return v.uid
	}
	return ""
}

// IsLeader is Valid(), under the name client-go's LeaderElector uses. Unlike client-go's
// IsLeader, which compares the last observed holder with the identity, it is true only while
// a consistent read confirms the term and its deadline has not passed.
func (e *Elector) IsLeader() bool { return e.Valid() }
