package chaos

import "testing"

// east's view while east holds token 10, then west holds 14 (east shows it as west's), then
// east holds 20 again.
func goodEast() []GlobalObs {
	return []GlobalObs{
		{Cluster: "east", RV: 1, Phase: "Pending"},
		{Cluster: "east", RV: 2, Phase: "Held", GlobalCluster: "east", GlobalHolderUID: "e0", Holder: "w-0", Round: 1, GlobalToken: 10, Delay: 12, Token: 10, MaxToken: 10},
		{Cluster: "east", RV: 3, Phase: "Held", GlobalCluster: "east", GlobalHolderUID: "e0", Holder: "w-0", Round: 2, GlobalToken: 10, Delay: 12, Token: 10, MaxToken: 10},
		{Cluster: "east", RV: 4, Phase: "Pending", Round: 2, GlobalToken: 10, Delay: 12, Token: 10, MaxToken: 10},
		{Cluster: "east", RV: 5, Phase: "Held", GlobalCluster: "west", Round: 2, GlobalToken: 10, Delay: 12, Token: 14, MaxToken: 14},
		{Cluster: "east", RV: 7, Phase: "Held", GlobalCluster: "east", GlobalHolderUID: "e1", Holder: "w-1", Round: 3, GlobalToken: 20, Delay: 12, Token: 20, MaxToken: 20},
		{Cluster: "east", RV: 9, Phase: "Held", GlobalCluster: "east", GlobalHolderUID: "e1", Holder: "w-1", Round: 5, GlobalToken: 20, Delay: 12, Token: 20, MaxToken: 20}, // a skipped version
	}
}

func TestCheckGlobalTokens(t *testing.T) {
	with := func(n int, o GlobalObs) []GlobalObs { return append(goodEast()[:n:n], o) }
	tests := []struct {
		name string
		obs  []GlobalObs
		want string
	}{
		{"good", goodEast(), ""},
		{"fencing token goes back", with(6, GlobalObs{Cluster: "east", RV: 8, Phase: "Held", GlobalCluster: "west", Round: 3, GlobalToken: 20, Delay: 12, Token: 18, MaxToken: 20}), "fencingToken went back from 20 to 18"},
		{"max token goes back", with(6, GlobalObs{Cluster: "east", RV: 8, Phase: "Pending", Round: 3, GlobalToken: 20, Delay: 12, MaxToken: 19}), "maxFencingToken went back"},
		{"round goes back", with(6, GlobalObs{Cluster: "east", RV: 8, Phase: "Held", GlobalCluster: "east", GlobalHolderUID: "e1", Round: 2, GlobalToken: 20, Delay: 12, Token: 20, MaxToken: 20}), "globalRound went back"},
		{"global token changes without a round step", with(3, GlobalObs{Cluster: "east", RV: 4, Phase: "Held", GlobalCluster: "east", GlobalHolderUID: "e1", Round: 2, GlobalToken: 11, Delay: 12, Token: 11, MaxToken: 11}), "without a round step"},
		{"global token goes back", with(6, GlobalObs{Cluster: "east", RV: 8, Phase: "Held", GlobalCluster: "east", GlobalHolderUID: "e2", Round: 4, GlobalToken: 15, Delay: 12, Token: 20, MaxToken: 20}), "globalToken went back"},
		{"delay changes alone", with(3, GlobalObs{Cluster: "east", RV: 4, Phase: "Held", GlobalCluster: "east", GlobalHolderUID: "e0", Round: 3, GlobalToken: 10, Delay: 30, Token: 10, MaxToken: 10}), "globalLockDelaySeconds changed"},
		{"new grant below the last", with(3, GlobalObs{Cluster: "east", RV: 4, Phase: "Held", GlobalCluster: "east", GlobalHolderUID: "e1", Round: 2, GlobalToken: 10, Delay: 12, Token: 9, MaxToken: 10}), "grant of token 9 to e1 after a grant of token 10"},
		{"one token, two pods", with(3, GlobalObs{Cluster: "east", RV: 4, Phase: "Held", GlobalCluster: "east", GlobalHolderUID: "e1", Round: 3, GlobalToken: 10, Delay: 12, Token: 10, MaxToken: 10}), "token 10 granted to e1 and before to another pod (e0)"},
		{"holderUID set", with(1, GlobalObs{Cluster: "east", RV: 2, Phase: "Held", HolderUID: "e0", GlobalCluster: "east", GlobalHolderUID: "e0", Round: 1, GlobalToken: 10, Delay: 12, Token: 10, MaxToken: 10}), "holderUID e0 set on a Global lock"},
		{"holder while another cluster holds", with(1, GlobalObs{Cluster: "east", RV: 2, Phase: "Held", GlobalCluster: "west", GlobalHolderUID: "e0", Round: 1, GlobalToken: 10, Delay: 12, Token: 10, MaxToken: 10}), `globalCluster is "west"`},
		{"token above max", with(1, GlobalObs{Cluster: "east", RV: 2, Phase: "Held", GlobalCluster: "east", GlobalHolderUID: "e0", Round: 1, GlobalToken: 10, Delay: 12, Token: 10, MaxToken: 9}), "above maxFencingToken"},
		{"out of order", with(2, GlobalObs{Cluster: "east", RV: 2, Phase: "Held", GlobalCluster: "east", GlobalHolderUID: "e0", Round: 1, GlobalToken: 10, Delay: 12, Token: 10, MaxToken: 10}), "out of order"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expect(t, CheckGlobalTokens(tt.obs), tt.want)
		})
	}
}

func TestCheckGlobalClaims(t *testing.T) {
	west := []GlobalObs{
		{Cluster: "west", RV: 3, Phase: "Held", GlobalCluster: "east", Token: 10, MaxToken: 10},
		{Cluster: "west", RV: 4, Phase: "Held", GlobalCluster: "west", GlobalHolderUID: "w0", Round: 1, GlobalToken: 14, Delay: 12, Token: 14, MaxToken: 14},
		{Cluster: "west", RV: 6, Phase: "Held", GlobalCluster: "east", Round: 1, GlobalToken: 14, Delay: 12, Token: 20, MaxToken: 20},
	}
	expect(t, CheckGlobalClaims(goodEast(), west), "")
	bad := append([]GlobalObs(nil), west[:2]...)
	bad = append(bad, GlobalObs{Cluster: "west", RV: 6, Phase: "Held", GlobalCluster: "west", GlobalHolderUID: "w1", Round: 2, GlobalToken: 20, Delay: 12, Token: 20, MaxToken: 20})
	expect(t, CheckGlobalClaims(goodEast(), bad), "token 20 claimed by east (rv 7) and by west (rv 6)")
	if vs := CheckGlobalClaims(goodEast(), bad); len(vs) != 1 {
		t.Errorf("CheckGlobalClaims = %v, want one violation for token 20", vs)
	}
}

func TestGlobalTerms(t *testing.T) {
	got := GlobalTerms(goodEast())
	if len(got) != 2 || got[0].Token != 10 || got[0].UID != "e0" || got[1].Token != 20 || got[1].UID != "e1" {
		t.Errorf("GlobalTerms = %+v, want tokens 10 (e0) and 20 (e1)", got)
	}
}
