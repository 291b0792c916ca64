package controllers

import (
	"fmt"
	"net"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// Leader-only routing: a lock's spec.routing names a selector-less Service whose one
// EndpointSlice the controller keeps listing exactly the holder pod while the lock is Held,
// and no pod otherwise. The turn that publishes a status empties the slice before a status
// that is not Held is written, and lists the holder only after a Held status was written, so
// no EndpointSlice event shows a pod while the published phase is Releasing, and never two.

const (
	// RoutingManagedBy is the endpointslice.kubernetes.io/managed-by value of the slices the
	// controller manages; kube-controller-manager's EndpointSlice controller leaves them alone.
	RoutingManagedBy = "lockwarden.io"
	// RoutingLockLabel names the lock (in the slice's namespace) that manages a slice.
	RoutingLockLabel = "lockwarden.io/lock"
)

// route is what a lock's routing asks the EndpointSlice to list.
type route struct {
	// pod is the listed pod, nil for none.
	pod *corev1.Pod
	// endpoints and ports are the slice's content; addressType its address family.
	endpoints   []discoveryv1.Endpoint
	ports       []discoveryv1.EndpointPort
	addressType discoveryv1.AddressType
	// problem says why the Service cannot be routed at all ("" when it can).
	problem string
	// note says why a port of the Service is left out or why no pod is listed.
	note string
}

// routingSliceName is the name of the EndpointSlice the controller manages for service.
func routingSliceName(service string) string { return service + "-lockwarden" }

// desiredRoute is a pure function of the status being published, the Service (nil when it
// does not exist) and the holder pod (nil when unknown): the holder pod is listed only when
// st is Held, the pod is the published holder (same UID) and has an IP; otherwise nothing.
func desiredRoute(st *lockv1.DistributedLockStatus, svc *corev1.Service, holder *corev1.Pod) route {
	switch {
	case svc == nil:
		return route{problem: "the Service does not exist"}
	case len(svc.Spec.Selector) > 0:
		return route{problem: "the Service has a selector: Kubernetes manages its endpoints; remove spec.selector from the Service"}
	case svc.Spec.Type == corev1.ServiceTypeExternalName:
		return route{problem: "the Service is of type ExternalName, which has no endpoints"}
	}
	r := route{addressType: discoveryv1.AddressTypeIPv4}
	switch {
	case st.Phase != lockv1.PhaseHeld || st.HolderUID == "":
		r.note = fmt.Sprintf("the lock is %s", phaseOrPending(st.Phase))
		return r
	case holder == nil || holder.UID != st.HolderUID:
		r.note = "the holder pod is not known yet"
		return r
	case holder.Status.PodIP == "":
		r.note = fmt.Sprintf("pod %s has no IP yet", holder.Name)
		return r
	}
	ip := net.ParseIP(holder.Status.PodIP)
	if ip == nil {
		r.note = fmt.Sprintf("pod %s has an IP kubectl cannot parse: %q", holder.Name, holder.Status.PodIP)
		return r
	}
	if ip.To4() == nil {
		r.addressType = discoveryv1.AddressTypeIPv6
	}
	for _, sp := range svc.Spec.Ports {
		port, ok := targetPort(sp, holder)
		if !ok {
			r.note = fmt.Sprintf("port %s: pod %s has no container port named %q", portName(sp), holder.Name, sp.TargetPort.StrVal)
			continue
		}
		r.ports = append(r.ports, discoveryv1.EndpointPort{Name: ptr.To(sp.Name), Protocol: ptr.To(protocolOf(sp)), Port: ptr.To(port), AppProtocol: sp.AppProtocol})
	}
	ready := true
	r.pod = holder
	r.endpoints = []discoveryv1.Endpoint{{
		Addresses:  []string{holder.Status.PodIP},
		Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &ready, Terminating: ptr.To(false)},
		NodeName:   nonEmpty(holder.Spec.NodeName),
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: holder.Namespace, Name: holder.Name, UID: holder.UID},
	}}
	return r
}

// targetPort resolves a Service port's targetPort against the pod's container ports.
func targetPort(sp corev1.ServicePort, pod *corev1.Pod) (int32, bool) {
	switch {
	case sp.TargetPort.Type == intstr.String && sp.TargetPort.StrVal != "":
		for _, c := range pod.Spec.Containers {
			for _, p := range c.Ports {
				if p.Name == sp.TargetPort.StrVal && (p.Protocol == protocolOf(sp) || (p.Protocol == "" && protocolOf(sp) == corev1.ProtocolTCP)) {
					return p.ContainerPort, true
				}
			}
		}
		return 0, false
	case sp.TargetPort.Type == intstr.Int && sp.TargetPort.IntVal != 0:
		return sp.TargetPort.IntVal, true
	}
	return sp.Port, true
}

func protocolOf(sp corev1.ServicePort) corev1.Protocol {
	if sp.Protocol == "" {
		return corev1.ProtocolTCP
	}
	return sp.Protocol
}

func portName(sp corev1.ServicePort) string {
	if sp.Name != "" {
		return sp.Name
	}
	return fmt.Sprint(sp.Port)
}

func phaseOrPending(p lockv1.Phase) lockv1.Phase {
	if p == "" {
		return lockv1.PhasePending
	}
	return p
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
