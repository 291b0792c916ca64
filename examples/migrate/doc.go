// Package migrate holds the programs of docs/migration.md: a client-go leader-election
// program and a controller-runtime manager, each before and after the move to lockwarden
// (clientgo/before, clientgo/after, controller-runtime/before, controller-runtime/after).
// Its test builds all four and checks that the guide's diff blocks are `diff -u` of them;
// `go test ./examples/migrate -run TestGuideDiffs -update` rewrites the blocks.
package migrate
