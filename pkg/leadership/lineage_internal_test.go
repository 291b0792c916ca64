package leadership

import "testing"

// TestAbandonMarksTheTokensLineage: Abandon marks the lineages in which this process led the
// token (or a higher one), and every lineage when it led none; a mark of one lineage never
// holds back the other's grants.
func TestAbandonMarksTheTokensLineage(t *testing.T) {
	tests := []struct {
		name               string
		cluster, global    int64 // the highest token led per lineage
		abandon            int64
		wantCluster, wantG int64
	}{
		{"led in the Cluster lineage only", 5000, 0, 5000, 5000, 0},
		{"led in the Global lineage only", 0, 200, 200, 0, 200},
		{"led in both at or above the token", 300, 200, 200, 200, 200},
		{"led only lower tokens: every lineage", 100, 50, 5000, 5000, 5000},
		{"led nothing (before Run): every lineage", 0, 0, 7, 7, 7},
		{"not positive: nothing", 10, 10, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := &Elector{abandons: make(chan struct{}, 1)}
			e.ledTop.raise(lineageCluster, tt.cluster)
			e.ledTop.raise(lineageGlobal, tt.global)
			e.Abandon(tt.abandon)
			if c, g := e.abandoned.load(lineageCluster), e.abandoned.load(lineageGlobal); c != tt.wantCluster || g != tt.wantG {
				t.Errorf("abandoned cluster %d, global %d; want %d, %d", c, g, tt.wantCluster, tt.wantG)
			}
		})
	}
}

// TestTokenMark: raise keeps the highest token per lineage, reset only the token it names.
func TestTokenMark(t *testing.T) {
	var m tokenMark
	m.raise(lineageCluster, 5)
	m.raise(lineageCluster, 3)
	m.raise(lineageGlobal, 2)
	if m.load(lineageCluster) != 5 || m.load(lineageGlobal) != 2 {
		t.Fatalf("marks %d, %d; want 5, 2", m.load(lineageCluster), m.load(lineageGlobal))
	}
	m.reset(lineageCluster, 3) // not the mark: kept
	m.reset(lineageGlobal, 2)
	if m.load(lineageCluster) != 5 || m.load(lineageGlobal) != 0 {
		t.Fatalf("after reset: %d, %d; want 5, 0", m.load(lineageCluster), m.load(lineageGlobal))
	}
}
