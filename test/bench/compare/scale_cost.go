package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// grantCost is what granting the new locks cost, from the API server's request metrics
// (apiserver_request_total), lockwarden's etcd (gRPC requests) and the processes' CPU
// (process_cpu_seconds_total), between the manager's start and a few seconds after the last
// lock was seen Held.
type grantCost struct {
	lockWrites  map[string]float64 // DistributedLock writes by "VERB" or "VERB status"
	lockReads   float64            // GET of single DistributedLocks (the uncached re-reads)
	events      float64            // Event writes (events.k8s.io and core)
	otherWrites map[string]float64 // every other write, by "VERB resource"
	etcd        map[string]float64 // lockwarden's etcd: requests by gRPC method
	cpu         map[string]float64 // CPU seconds: "kube-apiserver", "manager", "lockwarden etcd"
	reconciles  float64            // the manager's reconciles (from its start)
}

// costSnapshot is one reading of the three endpoints.
type costSnapshot struct {
	api, etcd, mgr families
}

func takeCost(ctx context.Context, s *stack) (*costSnapshot, error) {
	snap, err := takeSnapshot(ctx, s)
	if err != nil {
		return nil, err
	}
	mgr, err := s.managerMetrics(ctx)
	if err != nil {
		return nil, err
	}
	return &costSnapshot{api: snap.api, etcd: snap.etcd, mgr: mgr}, nil
}

// costBetween is the cost from a to b. The manager's CPU counts from its start (a is read
// right after it), so a's manager reading is not subtracted.
func costBetween(a, b *costSnapshot) *grantCost {
	isWrite := func(l map[string]string) bool {
		return l["resource"] != "" && slices.Contains(writeVerbs, l["verb"])
	}
	delta := func(name string, keep func(map[string]string) bool, key func(map[string]string) string) map[string]float64 {
		before, after := byKey(a.api, name, keep, key), byKey(b.api, name, keep, key)
		out := map[string]float64{}
		for k, v := range after {
			if d := v - before[k]; d > 0 {
				out[k] = d
			}
		}
		return out
	}
	c := &grantCost{otherWrites: map[string]float64{}, lockWrites: map[string]float64{}}
	writes := delta("apiserver_request_total", isWrite, func(l map[string]string) string {
		return strings.Join([]string{l["verb"], l["resource"], l["subresource"]}, " ")
	})
	for k, v := range writes {
		f := strings.Fields(k)
		switch {
		case len(f) >= 2 && f[1] == "distributedlocks":
			c.lockWrites[strings.Join(append([]string{f[0]}, f[2:]...), " ")] += v
		case len(f) >= 2 && f[1] == "events":
			c.events += v
		default:
			c.otherWrites[strings.TrimSpace(k)] += v
		}
	}
	c.lockReads = total(delta("apiserver_request_total", func(l map[string]string) bool {
		return l["resource"] == "distributedlocks" && l["verb"] == "GET"
	}, verbOf))
	grpc := "grpc_server_msg_received_total"
	if _, ok := b.etcd[grpc]; !ok {
		grpc = "grpc_server_started_total"
	}
	method := func(l map[string]string) string { return l["grpc_method"] }
	c.etcd = rates(byKey(a.etcd, grpc, nil, method), byKey(b.etcd, grpc, nil, method), 1)
	c.reconciles = sum(b.mgr, "controller_runtime_reconcile_total", nil)
	c.cpu = map[string]float64{
		"kube-apiserver":  sum(b.api, "process_cpu_seconds_total", nil) - sum(a.api, "process_cpu_seconds_total", nil),
		"lockwarden etcd": sum(b.etcd, "process_cpu_seconds_total", nil) - sum(a.etcd, "process_cpu_seconds_total", nil),
		"manager":         sum(b.mgr, "process_cpu_seconds_total", nil),
	}
	return c
}

// lockWritesTotal is every write of a DistributedLock.
func (c *grantCost) lockWritesTotal() float64 { return total(c.lockWrites) }

// describe lists the writes by kind, per new lock.
func (c *grantCost) describe(n int) string {
	per := func(m map[string]float64) string {
		var parts []string
		for _, k := range sortedKeys(m) {
			parts = append(parts, fmt.Sprintf("%s %.2f", k, m[k]/float64(n)))
		}
		if len(parts) == 0 {
			return "none"
		}
		return strings.Join(parts, ", ")
	}
	return fmt.Sprintf("reconciles %.2f; DistributedLock writes: %s; uncached GETs of a lock %.2f; Events %.2f; other writes: %s; lockwarden etcd requests: %s",
		c.reconciles/float64(n), per(c.lockWrites), c.lockReads/float64(n), c.events/float64(n), per(c.otherWrites), per(c.etcd))
}
