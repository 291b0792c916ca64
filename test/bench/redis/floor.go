package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// floor is the bare SET/DEL loop measured in the same run as the engines:
// one client, SET key NX PX then DEL, each its own round trip, nothing else.
// It is what a lock cycle costs with no token, no fencing, no queue and no
// renewal: the floor under which no engine's cycle on this server goes.
type floor struct {
	cycles  int64
	elapsed time.Duration
	lat     []time.Duration // one SET + DEL
}

func (f floor) rate() float64 {
	if f.elapsed <= 0 {
		return 0
	}
	return float64(f.cycles) / f.elapsed.Seconds()
}

// measureFloor runs the bare loop for d on a fresh client of addr and adds
// the outcome to rep.floor.
func (rep *report) measureFloor(ctx context.Context, addr string, d time.Duration) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	const key = "bench:floor"
	cycle := func() error {
		ok, err := rdb.SetNX(ctx, key, "v", 10*time.Second).Result()
		if err != nil || !ok {
			return fmt.Errorf("SET %s NX PX: %v, %w", key, ok, err)
		}
		return rdb.Del(ctx, key).Err()
	}
	for range 50 { // the connection
		if err := cycle(); err != nil {
			return err
		}
	}
	t0 := time.Now()
	for time.Since(t0) < d {
		c0 := time.Now()
		if err := cycle(); err != nil {
			return err
		}
		rep.floor.lat = append(rep.floor.lat, time.Since(c0))
		rep.floor.cycles++
	}
	rep.floor.elapsed += time.Since(t0)
	return nil
}
