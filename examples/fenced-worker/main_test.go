package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestLedgerHandler: --shards 0 serves one ledger at /, 1 to 16 serve that many shards under
// /shards/<i>/, anything else is refused with the range in the message.
func TestLedgerHandler(t *testing.T) {
	for _, tc := range []struct {
		shards  int
		path    string // GET answered 200
		missing string // GET answered 404
		err     string
	}{
		{shards: 0, path: "/entries", missing: "/shards/0/entries"},
		{shards: 3, path: "/shards/2/entries", missing: "/shards/3/entries"},
		{shards: 16, path: "/shards/15/entries", missing: "/entries"},
		{shards: 17, err: "--shards 17: want 0 (one ledger) or 1 to 16"},
		{shards: -1, err: "--shards -1: want 0 (one ledger) or 1 to 16"},
	} {
		h, err := ledgerHandler(tc.shards)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ledgerHandler(%d) = %v, want an error containing %q", tc.shards, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("ledgerHandler(%d) = %v, want nil", tc.shards, err)
		}
		for path, want := range map[string]int{tc.path: http.StatusOK, tc.missing: http.StatusNotFound} {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
			if rec.Code != want {
				t.Errorf("ledgerHandler(%d): GET %s = %d, want %d", tc.shards, path, rec.Code, want)
			}
		}
	}
}
