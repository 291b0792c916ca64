// Package eligibility is the rule for who may hold a DistributedLock and why a pod may not:
// the one statement of DESIGN.md's eligibility rule (Running, Ready=True, not being
// deleted), the order in which spec.strategy prefers candidates, and the explanation of both
// for a reader.
//
// The controller grants by Eligible and Choose; kubectl dlock why and the controller's
// Held=False NoHolder condition explain by Explain, which calls the same two, so an
// explanation cannot disagree with a grant. Everything here is a pure function of the lock's
// spec and status and the pods given: no clock, no API server, no etcd. Choose takes the pods the
// selector matches; Explain takes any pods and lists those it does not match as
// PodNotSelected. When a Preferred holder preempts another is the controller's term
// lifecycle, not this package's.
package eligibility
