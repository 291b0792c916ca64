package main

import (
	"errors"
	"fmt"
	"io"
	"runtime"
)

// version is the release this binary was built from. `make build` and `make image` set it
// with -ldflags "-X main.version=<git describe>"; a plain `go build` leaves "dev".
var version = "dev"

// errVersion is returned by parseFlags for --version: print the version and exit 0.
var errVersion = errors.New("version requested")

// printVersion writes the one line `lockwarden --version` prints.
func printVersion(w io.Writer) {
	fmt.Fprintf(w, "lockwarden %s (%s, %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
