// Command mkimage writes a single-layer container image from scratch as a docker-archive
// tarball, with the standard library only: no Docker, no registry. `make image` builds the
// manager, fenced-worker and pause images with it; hack/node imports them with
// `ctr -n k8s.io images import`, and pods use them with imagePullPolicy: Never.
//
//	mkimage -name localhost/lockwarden:dev -out bin/images/lockwarden.tar \
//	    -file bin/images/lockwarden:/lockwarden -user 65532:65532 -entrypoint /lockwarden
//
// The image holds the -file files (mode 0755), /tmp and the passwd and group entries of
// root and nonroot (65532), like gcr.io/distroless/static:nonroot; its config holds -user
// and -entrypoint (repeat -entrypoint for arguments). The same inputs give the same bytes.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
)

// list is a repeatable string flag.
type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(2)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("mkimage", flag.ContinueOnError)
	var files, entry list
	name := fs.String("name", "", "image reference to record, e.g. localhost/lockwarden:dev")
	out := fs.String("out", "", "tarball to write")
	user := fs.String("user", "", "the config's User, e.g. 65532:65532")
	fs.Var(&files, "file", "SRC:DEST: put the file SRC at DEST in the image, mode 0755 (repeatable)")
	fs.Var(&entry, "entrypoint", "one word of the entrypoint (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" {
		return errors.New("-out is required")
	}
	spec := Spec{Name: *name, User: *user, Entrypoint: entry}
	for _, f := range files {
		src, dest, ok := strings.Cut(f, ":")
		if !ok || src == "" {
			return fmt.Errorf("-file %q: want SRC:DEST", f)
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return fmt.Errorf("read -file source: %w", err)
		}
		spec.Files = append(spec.Files, File{Path: dest, Mode: 0o755, Data: data})
	}
	b, err := Archive(spec)
	if err != nil {
		return fmt.Errorf("build %s: %w", *name, err)
	}
	// write beside and rename: a failed run never leaves half a tarball under the real name
	tmp := *out + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("write image: %w", err)
	}
	if err := os.Rename(tmp, *out); err != nil {
		return fmt.Errorf("write image: %w", err)
	}
	return nil
}
