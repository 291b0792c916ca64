package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"
)

// Sentinel errors for a Spec that cannot become an image.
var (
	ErrNoName       = errors.New("image name is empty")
	ErrNoEntrypoint = errors.New("entrypoint is empty")
	ErrBadPath      = errors.New("file path must be absolute and clean, not /")
	ErrDuplicate    = errors.New("file path given twice")
)

// epoch is every timestamp in the image: the same inputs give the same bytes.
var epoch = time.Unix(0, 0).UTC()

// File is one regular file of the image.
type File struct {
	// Path is where the file is in the image: absolute and clean (/lockwarden).
	Path string
	// Mode is its permission bits (0o755 for a binary).
	Mode int64
	// Data is its content.
	Data []byte
}

// Spec is what an image holds: like a FROM scratch Dockerfile with COPY, USER and ENTRYPOINT.
type Spec struct {
	// Name is the image reference recorded in the archive (localhost/lockwarden:dev).
	Name string
	// Files are the regular files, in the order given.
	Files []File
	// User is the config's User ("65532:65532"); empty means root.
	User string
	// Entrypoint is the config's Entrypoint; required.
	Entrypoint []string
}

// baseFiles are what the image has besides Spec.Files: the parts of distroless/static:nonroot
// a static Go binary can use (/tmp, and the passwd/group entries of root and nonroot).
func baseFiles() []File {
	return []File{
		{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{Path: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnonroot:x:65532:\n")},
	}
}

// Validate reports the first reason s cannot become an image.
func (s Spec) Validate() error {
	if s.Name == "" {
		return ErrNoName
	}
	if len(s.Entrypoint) == 0 || s.Entrypoint[0] == "" {
		return ErrNoEntrypoint
	}
	seen := map[string]bool{}
	for _, f := range append(baseFiles(), s.Files...) {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/" {
			return fmt.Errorf("%w: %q", ErrBadPath, f.Path)
		}
		if seen[f.Path] {
			return fmt.Errorf("%w: %q", ErrDuplicate, f.Path)
		}
		seen[f.Path] = true
	}
	return nil
}

// Archive returns s as a docker-archive (the `docker save` format: manifest.json, the
// config JSON and one layer tar), which `ctr images import` and `docker load` both read.
func Archive(s Spec) ([]byte, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	layer, err := layerTar(append(baseFiles(), s.Files...))
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(layer)
	cfg, err := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux", "created": epoch.Format(time.RFC3339),
		"config": map[string]any{"Entrypoint": s.Entrypoint, "User": s.User, "Env": []string{"PATH=/"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(sum[:])}},
	})
	if err != nil {
		return nil, fmt.Errorf("encode config: %w", err)
	}
	cs := sha256.Sum256(cfg)
	cfgName := hex.EncodeToString(cs[:]) + ".json"
	manifest, err := json.Marshal([]map[string]any{{"Config": cfgName, "RepoTags": []string{s.Name}, "Layers": []string{"layer.tar"}}})
	if err != nil {
		return nil, fmt.Errorf("encode manifest: %w", err)
	}
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	for _, e := range []File{{Path: cfgName, Data: cfg}, {Path: "layer.tar", Data: layer}, {Path: "manifest.json", Data: manifest}} {
		if err := writeFile(tw, e.Path, 0o644, e.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("close archive: %w", err)
	}
	return out.Bytes(), nil
}

// layerTar writes files, with every parent folder first and /tmp (mode 1777), as one layer.
func layerTar(files []File) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	addDir := func(d string, mode int64) error {
		if dirs[d] {
			return nil
		}
		dirs[d] = true
		return tw.WriteHeader(&tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: mode, ModTime: epoch})
	}
	if err := addDir("tmp", 0o1777); err != nil {
		return nil, fmt.Errorf("write /tmp: %w", err)
	}
	for _, f := range files {
		name := strings.TrimPrefix(f.Path, "/")
		var parents []string
		for d := path.Dir(name); d != "."; d = path.Dir(d) {
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents {
			if err := addDir(d, 0o755); err != nil {
				return nil, fmt.Errorf("write folder %s: %w", d, err)
			}
		}
		if err := writeFile(tw, name, f.Mode, f.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("close layer: %w", err)
	}
	return buf.Bytes(), nil
}

func writeFile(tw *tar.Writer, name string, mode int64, data []byte) error {
	if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: mode, Size: int64(len(data)), ModTime: epoch}); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if _, err := tw.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}
