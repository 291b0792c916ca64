package leadership_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/lockwarden/lockwarden/pkg/leadership"
)

// TestNewRejectsInvalidConfig checks that New refuses each invalid field with an error that
// wraps ErrInvalidConfig and names the field, and takes Identity from $POD_UID.
func TestNewRejectsInvalidConfig(t *testing.T) {
	valid := func() leadership.Config {
		return leadership.Config{
			Config:    &rest.Config{Host: "https://127.0.0.1:6443"},
			Namespace: "shop",
			Lock:      "payments-leader",
			Identity:  "1f0c7a52-0000-4000-8000-000000000001",
		}
	}
	tests := []struct {
		name   string
		podUID string // $POD_UID
		mutate func(*leadership.Config)
		field  string // named in the error; "" means New succeeds
	}{
		{"valid", "", func(*leadership.Config) {}, ""},
		{"identity from POD_UID", "uid-from-env", func(c *leadership.Config) { c.Identity = "" }, ""},
		{"no rest config", "", func(c *leadership.Config) { c.Config = nil }, "Config"},
		{"unusable rest config", "", func(c *leadership.Config) {
			c.Config = &rest.Config{Host: "https://127.0.0.1:6443", TLSClientConfig: rest.TLSClientConfig{CAFile: "/nonexistent/ca.crt"}}
		}, "Config"},
		{"no namespace", "", func(c *leadership.Config) { c.Namespace = "" }, "Namespace"},
		{"invalid namespace", "", func(c *leadership.Config) { c.Namespace = "Shop_1" }, "Namespace"},
		{"no lock", "", func(c *leadership.Config) { c.Lock = "" }, "Lock"},
		{"invalid lock", "", func(c *leadership.Config) { c.Lock = "Payments Leader" }, "Lock"},
		{"no identity", "", func(c *leadership.Config) { c.Identity = "" }, "Identity"},
		{"negative margin", "", func(c *leadership.Config) { c.Margin = -time.Second }, "Margin"},
		{"negative stop budget", "", func(c *leadership.Config) { c.StopBudget = -time.Second }, "StopBudget"},
		{"negative release timeout", "", func(c *leadership.Config) { c.ReleaseTimeout = -time.Second }, "ReleaseTimeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("POD_UID", tt.podUID)
			cfg := valid()
			tt.mutate(&cfg)
			_, err := leadership.New(cfg)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("New() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, leadership.ErrInvalidConfig) {
				t.Fatalf("New() = %v, want an error wrapping ErrInvalidConfig", err)
			}
			if prefix := "leadership: invalid config: " + tt.field + ":"; !strings.HasPrefix(err.Error(), prefix) {
				t.Errorf("New() = %q, want it to start with %q", err, prefix)
			}
		})
	}
}

// TestDefaultMargin checks min(max(2s, L/50), L/4) at its corners.
func TestDefaultMargin(t *testing.T) {
	tests := []struct {
		lease, want time.Duration
	}{
		{2 * time.Second, 500 * time.Millisecond}, // L/4 below 2s
		{6 * time.Second, 1500 * time.Millisecond},
		{8 * time.Second, 2 * time.Second},
		{15 * time.Second, 2 * time.Second},
		{100 * time.Second, 2 * time.Second},
		{200 * time.Second, 4 * time.Second}, // L/50 above 2s
		{3600 * time.Second, 72 * time.Second},
	}
	for _, tt := range tests {
		if got := leadership.DefaultMargin(tt.lease); got != tt.want {
			t.Errorf("DefaultMargin(%v) = %v, want %v", tt.lease, got, tt.want)
		}
	}
}
