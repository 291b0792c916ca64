package controllers

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// Cache indexes keep the two lookups that run per event, pod -> locks and lock -> candidate
// pods, proportional to what matches instead of to everything in the namespace. Without them
// a namespace with 10,000 locks and 30,000 pods made every pod event list every lock, and the
// controller could not finish its first cache sync for minutes.
const (
	// podLabelIndex indexes a pod under "key=value" for each of its labels.
	podLabelIndex = "lockwarden.io/pod-label"
	// lockLabelIndex indexes a lock under one "key=value" its selector requires (the first of
	// matchLabels by key), or anyLabel when matchLabels is empty.
	lockLabelIndex = "lockwarden.io/selector-label"
	// lockHolderIndex indexes a lock under its status.holderUID, every slot's holderUID and
	// (a Global lock) its status.globalHolderUID.
	lockHolderIndex = "lockwarden.io/holder-uid"
	// lockGlobalNameIndex indexes a Global lock under its spec.globalName: the global keys'
	// watch wakes the locks of a name, and the oldest of them contends (finding F2).
	lockGlobalNameIndex = "lockwarden.io/global-name"
	// anyLabel is the lockLabelIndex value of a lock whose selector has no matchLabels: it is
	// checked against every pod of its namespace.
	anyLabel = "*"
)

// AddIndexes registers the controller's cache indexes. It must run before the manager's
// cache starts; Active.AddToManager calls it.
func AddIndexes(ctx context.Context, idx client.FieldIndexer) error {
	for _, ix := range []struct {
		obj     client.Object
		name    string
		extract client.IndexerFunc
	}{
		{&corev1.Pod{}, podLabelIndex, func(o client.Object) []string { return labelTerms(o.GetLabels()) }},
		{&lockv1.DistributedLock{}, lockLabelIndex, func(o client.Object) []string {
			return []string{selectorTerm(o.(*lockv1.DistributedLock))}
		}},
		{&lockv1.DistributedLock{}, lockHolderIndex, func(o client.Object) []string {
			st := &o.(*lockv1.DistributedLock).Status
			var uids []string
			if st.HolderUID != "" {
				uids = append(uids, string(st.HolderUID))
			}
			for _, s := range st.Slots {
				if s.HolderUID != "" {
					uids = append(uids, string(s.HolderUID))
				}
			}
			if st.GlobalHolderUID != "" {
				uids = append(uids, string(st.GlobalHolderUID))
			}
			return uids
		}},
		{&lockv1.DistributedLock{}, lockGlobalNameIndex, func(o client.Object) []string {
			if l := o.(*lockv1.DistributedLock); globalScoped(l) {
				return []string{l.Spec.GlobalName}
			}
			return nil
		}},
	} {
		if err := idx.IndexField(ctx, ix.obj, ix.name, ix.extract); err != nil {
			return fmt.Errorf("index %s: %w", ix.name, err)
		}
	}
	return nil
}

func labelTerms(l map[string]string) []string {
	out := make([]string, 0, len(l))
	for k, v := range l {
		out = append(out, k+"="+v)
	}
	return out
}

// selectorTerm is the lock's lockLabelIndex value: a pod the lock selects carries it.
func selectorTerm(l *lockv1.DistributedLock) string {
	sel := l.Spec.Candidates.Selector
	if sel == nil || len(sel.MatchLabels) == 0 {
		return anyLabel
	}
	keys := make([]string, 0, len(sel.MatchLabels))
	for k := range sel.MatchLabels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys[0] + "=" + string(sel.MatchLabels[keys[0]])
}

// candidatePods lists the pods of the lock's namespace that selector matches, through the
// pod label index when the selector has matchLabels.
func candidatePods(ctx context.Context, c client.Reader, l *lockv1.DistributedLock, selector labels.Selector) ([]corev1.Pod, error) {
	opts := []client.ListOption{client.InNamespace(l.Namespace), client.MatchingLabelsSelector{Selector: selector}}
	if term := selectorTerm(l); term != anyLabel {
		opts = append(opts, client.MatchingFields{podLabelIndex: term})
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, opts...); err != nil {
		return nil, err
	}
	return pods.Items, nil
}

// locksFor returns the locks that select pod or name it as holder, read from the cache
// without copies: callers must not modify them.
func locksFor(ctx context.Context, c client.Reader, pod *corev1.Pod) ([]*lockv1.DistributedLock, error) {
	seen := map[client.ObjectKey]bool{}
	var out []*lockv1.DistributedLock
	add := func(field, value string, check bool) error {
		var list lockv1.DistributedLockList
		if err := c.List(ctx, &list, client.InNamespace(pod.Namespace), client.MatchingFields{field: value}, client.UnsafeDisableDeepCopy); err != nil {
			return err
		}
		for i := range list.Items {
			l := &list.Items[i]
			k := client.ObjectKeyFromObject(l)
			if seen[k] || (check && !selects(l, pod)) {
				continue
			}
			seen[k] = true
			out = append(out, l)
		}
		return nil
	}
	if err := add(lockHolderIndex, string(pod.UID), false); err != nil {
		return nil, err
	}
	for _, term := range append(labelTerms(pod.Labels), anyLabel) {
		if err := add(lockLabelIndex, term, true); err != nil {
			return nil, err
		}
	}
	return out, nil
}
