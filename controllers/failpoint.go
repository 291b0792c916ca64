//go:build !chaos

package controllers

// failpoint reports whether the named fault should fire now. Without the chaos build tag
// there are none; see failpoint_chaos.go.
func failpoint(string) bool { return false }
