package redislock

import (
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestIsNil(t *testing.T) {
	live := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	t.Cleanup(func() { _ = live.Close() })
	tests := []struct {
		name string
		rdb  redis.UniversalClient
		want bool
	}{
		{"untyped nil", nil, true},
		{"nil *Client", (*redis.Client)(nil), true},
		{"nil *ClusterClient", (*redis.ClusterClient)(nil), true},
		{"nil *Ring", (*redis.Ring)(nil), true},
		{"client", live, false},
	}
	for _, tt := range tests {
		if got := isNil(tt.rdb); got != tt.want {
			t.Errorf("isNil(%s) = %v, want %v", tt.name, got, tt.want)
		}
	}
}
