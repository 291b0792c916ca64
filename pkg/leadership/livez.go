package leadership

import (
	"fmt"
	"net/http"
	"time"
)

// LivezCheck is a liveness check (the shape of controller-runtime's healthz.Checker), the
// analogue of client-go's HealthzAdaptor: it fails while the callbacks of an ended term
// (OnStartedLeading returning, then OnStoppedLeading) have not completed for longer than
// Config.StopBudget + Config.LivenessTimeout after the term ended, so that the kubelet
// restarts a container whose work does not stop. A slow OnNewHolder that holds up a term's
// stop callbacks counts too: they are queued behind it.
//
// It never fails because the pod does not lead, cannot reach the API server or is refused a
// term: those are ReadyzCheck's, and restarting a container does not cure them. Before Run
// starts and after Run returned it passes: no term's callbacks can be pending then (Run
// returns only after they completed), and a liveness probe that failed while a program
// starts up or winds down would restart a container that is doing what it should.
func (e *Elector) LivezCheck(*http.Request) error {
	t := now()
	e.mu.Lock()
	var oldest instant
	pending := len(e.ready.stops) > 0
	if pending {
		oldest = e.ready.stops[0]
	}
	e.mu.Unlock()
	return stopOverdue(pending, oldest, t, e.cfg.StopBudget+e.cfg.LivenessTimeout)
}

// stopOverdue is LivezCheck's decision: an error when stop callbacks are pending for a term
// that ended at ended, and more than limit has passed since then at t.
func stopOverdue(pending bool, ended, t instant, limit time.Duration) error {
	if !pending {
		return nil
	}
	if late := t.Sub(ended); late > limit {
		return fmt.Errorf("leadership: callbacks of a term still running %v after it ended, over the liveness limit %v (stop budget + liveness timeout)",
			late.Round(time.Millisecond), limit)
	}
	return nil
}
