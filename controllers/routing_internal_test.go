package controllers

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

func TestDesiredRoute(t *testing.T) {
	svc := func(mut ...func(*corev1.Service)) *corev1.Service {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns"}, Spec: corev1.ServiceSpec{
			Ports: []corev1.ServicePort{{Name: "pg", Port: 5432}, {Name: "metrics", Port: 80, TargetPort: intstr.FromString("http")}},
		}}
		for _, m := range mut {
			m(s)
		}
		return s
	}
	pod := func(mut ...func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db-0", Namespace: "ns", UID: "u0"},
			Spec:   corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}},
			Status: corev1.PodStatus{PodIP: "10.0.0.5"}}
		for _, m := range mut {
			m(p)
		}
		return p
	}
	held := &lockv1.DistributedLockStatus{Phase: lockv1.PhaseHeld, Holder: "db-0", HolderUID: "u0", FencingToken: 7}
	tests := []struct {
		name      string
		st        *lockv1.DistributedLockStatus
		svc       *corev1.Service
		pod       *corev1.Pod
		wantPod   string // "" for none
		wantPorts []int32
		problem   string
		note      string
	}{
		{"held: the holder with resolved ports", held, svc(), pod(), "db-0", []int32{5432, 8080}, "", ""},
		{"int targetPort", held, svc(func(s *corev1.Service) {
			s.Spec.Ports = []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(9090)}}
		}), pod(), "db-0", []int32{9090}, "", ""},
		{"named port missing: left out, said", held, svc(), pod(func(p *corev1.Pod) { p.Spec.Containers[0].Ports = nil }), "db-0", []int32{5432}, "", `no container port named "http"`},
		{"IPv6 pod", held, svc(), pod(func(p *corev1.Pod) { p.Status.PodIP = "fd00::5" }), "db-0", []int32{5432, 8080}, "", ""},
		{"releasing: nobody", &lockv1.DistributedLockStatus{Phase: lockv1.PhaseReleasing, HolderUID: "u0"}, svc(), pod(), "", nil, "", "the lock is Releasing"},
		{"pending: nobody", &lockv1.DistributedLockStatus{}, svc(), nil, "", nil, "", "the lock is Pending"},
		{"suspended: nobody", &lockv1.DistributedLockStatus{Phase: lockv1.PhaseSuspended}, svc(), nil, "", nil, "", "the lock is Suspended"},
		{"another pod than the holder: nobody", held, svc(), pod(func(p *corev1.Pod) { p.UID = "u9" }), "", nil, "", "not known"},
		{"holder without IP: nobody", held, svc(), pod(func(p *corev1.Pod) { p.Status.PodIP = "" }), "", nil, "", "no IP yet"},
		{"no Service", held, nil, pod(), "", nil, "does not exist", ""},
		{"Service with a selector", held, svc(func(s *corev1.Service) { s.Spec.Selector = map[string]string{"app": "db"} }), pod(), "", nil, "has a selector", ""},
		{"ExternalName Service", held, svc(func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeExternalName }), pod(), "", nil, "ExternalName", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := desiredRoute(tt.st, tt.svc, tt.pod)
			if tt.problem != "" || r.problem != "" {
				if !strings.Contains(r.problem, tt.problem) || tt.problem == "" {
					t.Fatalf("problem = %q, want %q", r.problem, tt.problem)
				}
				return
			}
			if tt.note != "" && !strings.Contains(r.note, tt.note) {
				t.Errorf("note = %q, want it to contain %q", r.note, tt.note)
			}
			if tt.wantPod == "" {
				if r.pod != nil || len(r.endpoints) != 0 {
					t.Fatalf("route lists %v, want no pod", r.endpoints)
				}
				return
			}
			if r.pod == nil || r.pod.Name != tt.wantPod || len(r.endpoints) != 1 {
				t.Fatalf("route lists %v, want exactly %s", r.endpoints, tt.wantPod)
			}
			ep := r.endpoints[0]
			if ep.Addresses[0] != tt.pod.Status.PodIP || ep.TargetRef.UID != tt.pod.UID || !*ep.Conditions.Ready {
				t.Errorf("endpoint = %+v, want the pod's IP, ref and Ready", ep)
			}
			wantType := discoveryv1.AddressTypeIPv4
			if strings.Contains(tt.pod.Status.PodIP, ":") {
				wantType = discoveryv1.AddressTypeIPv6
			}
			if r.addressType != wantType {
				t.Errorf("addressType = %s, want %s", r.addressType, wantType)
			}
			var ports []int32
			for _, p := range r.ports {
				ports = append(ports, *p.Port)
			}
			if len(ports) != len(tt.wantPorts) {
				t.Fatalf("ports = %v, want %v", ports, tt.wantPorts)
			}
			for i := range ports {
				if ports[i] != tt.wantPorts[i] {
					t.Errorf("ports = %v, want %v", ports, tt.wantPorts)
				}
			}
		})
	}
}
