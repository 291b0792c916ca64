package chaos

import "testing"

func TestCheckGrantsTombstoned(t *testing.T) {
	grant := func(rev int64, cluster, uid string) []GlobalEvent {
		return []GlobalEvent{
			{Rev: rev, Key: KeyGrant, CreateRev: rev, Kind: "grant", Cluster: cluster, HolderUID: uid},
			{Rev: rev, Key: KeyTombstone, Kind: "grant", Cluster: cluster, HolderUID: uid},
		}
	}
	good := append(grant(10, "east", "e0"), GlobalEvent{Rev: 11, Key: KeyGrant, Deleted: true},
		GlobalEvent{Rev: 12, Key: KeyTombstone, Kind: "waiting", Cluster: "west"})
	good = append(good, grant(14, "west", "w0")...)
	expect(t, CheckGrantsTombstoned(good), "")
	noTomb := []GlobalEvent{{Rev: 10, Key: KeyGrant, CreateRev: 10, Kind: "grant", Cluster: "east", Holder: "w-0", HolderUID: "e0"}}
	expect(t, CheckGrantsTombstoned(noTomb), "grant 10 to east/w-0 put no tombstone")
	other := []GlobalEvent{noTomb[0], {Rev: 10, Key: KeyTombstone, Kind: "grant", Cluster: "west", HolderUID: "w0"}}
	expect(t, CheckGrantsTombstoned(other), `put a tombstone of kind "grant" for west`)
	deleted := []GlobalEvent{good[0], good[1], {Rev: 11, Key: KeyTombstone, Deleted: true}}
	expect(t, CheckGrantsTombstoned(deleted), "tombstone was deleted at revision 11")
	// a K put that is not a creation (a new value on the same key) is no grant
	update := []GlobalEvent{good[0], good[1], {Rev: 11, Key: KeyGrant, CreateRev: 10, Kind: "grant", Cluster: "east", HolderUID: "e0"}}
	expect(t, CheckGrantsTombstoned(update), "")
}

func TestCheckClaimsGranted(t *testing.T) {
	evs := []GlobalEvent{
		{Rev: 10, Key: KeyGrant, CreateRev: 10, Kind: "grant", Cluster: "east", Holder: "w-0", HolderUID: "e0"},
		{Rev: 20, Key: KeyGrant, CreateRev: 20, Kind: "grant", Cluster: "east", Holder: "w-1", HolderUID: "e1"},
	}
	expect(t, CheckClaimsGranted(evs, goodEast()), "")
	expect(t, CheckClaimsGranted(evs[:1], goodEast()), "east claims token 20 for w-1 (e1); the shared etcd made no grant")
	wrong := []GlobalEvent{evs[0], {Rev: 20, Key: KeyGrant, CreateRev: 20, Kind: "grant", Cluster: "west", Holder: "w-1", HolderUID: "w1"}}
	expect(t, CheckClaimsGranted(wrong, goodEast()), "granted it to west/w-1 (w1)")
}
