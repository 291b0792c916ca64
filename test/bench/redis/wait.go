package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwarden/lockwarden/internal/redistest"
	"github.com/lockwarden/lockwarden/pkg/redislock"
)

// waitCost is uncontended acquire+release of pkg/redislock against a primary
// with one replica, without and with Config.WaitReplicas = 1.
type waitCost struct {
	without, with []time.Duration
}

func measureWait(ctx context.Context, n int) (waitCost, error) {
	dir, err := os.MkdirTemp("", "bench-redis-wait-")
	if err != nil {
		return waitCost{}, err
	}
	defer os.RemoveAll(dir)
	if err := os.MkdirAll(dir+"/primary", 0o755); err != nil {
		return waitCost{}, err
	}
	if err := os.MkdirAll(dir+"/replica", 0o755); err != nil {
		return waitCost{}, err
	}
	primary, err := redistest.New(dir+"/primary", redistest.Config{})
	if err != nil {
		return waitCost{}, err
	}
	defer primary.Stop()
	replica, err := redistest.New(dir+"/replica", redistest.Config{ReplicaOf: primary.Addr()})
	if err != nil {
		return waitCost{}, err
	}
	defer replica.Stop()
	rr := redis.NewClient(&redis.Options{Addr: replica.Addr()})
	defer rr.Close()
	for deadline := time.Now().Add(20 * time.Second); ; {
		info, _ := rr.Info(ctx, "replication").Result()
		if strings.Contains(info, "master_link_status:up") {
			break
		}
		if time.Now().After(deadline) {
			return waitCost{}, fmt.Errorf("replica not in sync")
		}
		time.Sleep(50 * time.Millisecond)
	}
	var w waitCost
	for _, replicas := range []int{0, 1} {
		rdb := redis.NewClient(&redis.Options{Addr: primary.Addr()})
		c, err := redislock.New(rdb, redislock.Config{TTL: 10 * time.Second, WaitReplicas: replicas})
		if err != nil {
			return waitCost{}, err
		}
		o := &oursC{c: c, rdb: rdb}
		if _, err := uncontended(ctx, o, "warm", 100); err != nil {
			return waitCost{}, err
		}
		lat, err := uncontended(ctx, o, "wait", n)
		o.close()
		if err != nil {
			return waitCost{}, err
		}
		if replicas == 0 {
			w.without = lat
		} else {
			w.with = lat
		}
	}
	return w, nil
}
