//go:build chaos

package controllers

import (
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Failpoints for the fault-injection suite, compiled only with `-tags chaos`:
// LOCKWARDEN_FAILPOINTS="drop-status-after-grant=0.3,lose-release-reply=0.5" fires each
// named fault with the given probability.
//
//   - drop-status-after-grant: the grant committed in etcd but its status write is skipped,
//     as if the write was lost; the next turn must adopt and publish it.
//   - lose-release-reply: the release committed but its reply is reported lost; the next
//     turn must re-read, never delete a newer grant.
var failpoints = parseFailpoints(os.Getenv("LOCKWARDEN_FAILPOINTS"))

func parseFailpoints(s string) map[string]float64 {
	m := map[string]float64{}
	for _, kv := range strings.Split(s, ",") {
		name, p, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			continue
		}
		if f, err := strconv.ParseFloat(p, 64); err == nil {
			m[name] = f
		}
	}
	return m
}

var failpointMu sync.Mutex

func failpoint(name string) bool {
	failpointMu.Lock()
	p, ok := failpoints[name]
	failpointMu.Unlock()
	return ok && rand.Float64() < p
}

// SetFailpoints replaces the failpoints (for in-process tests built with -tags chaos).
func SetFailpoints(m map[string]float64) {
	failpointMu.Lock()
	defer failpointMu.Unlock()
	failpoints = m
}
