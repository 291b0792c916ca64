package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestValidate(t *testing.T) {
	ok := Spec{Name: "x:1", Entrypoint: []string{"/x"}, Files: []File{{Path: "/x", Mode: 0o755}}}
	for _, tc := range []struct {
		name string
		edit func(*Spec)
		want error
	}{
		{"valid", func(*Spec) {}, nil},
		{"no name", func(s *Spec) { s.Name = "" }, ErrNoName},
		{"no entrypoint", func(s *Spec) { s.Entrypoint = nil }, ErrNoEntrypoint},
		{"empty entrypoint word", func(s *Spec) { s.Entrypoint = []string{""} }, ErrNoEntrypoint},
		{"relative path", func(s *Spec) { s.Files[0].Path = "x" }, ErrBadPath},
		{"unclean path", func(s *Spec) { s.Files[0].Path = "/a/../x" }, ErrBadPath},
		{"root", func(s *Spec) { s.Files[0].Path = "/" }, ErrBadPath},
		{"twice", func(s *Spec) { s.Files = append(s.Files, s.Files[0]) }, ErrDuplicate},
		{"over a base file", func(s *Spec) { s.Files[0].Path = "/etc/passwd" }, ErrDuplicate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := ok
			s.Files = append([]File(nil), ok.Files...)
			tc.edit(&s)
			if err := s.Validate(); !errors.Is(err, tc.want) {
				t.Errorf("Validate() = %v, want %v", err, tc.want)
			}
			if _, err := Archive(s); !errors.Is(err, tc.want) {
				t.Errorf("Archive() error = %v, want %v", err, tc.want)
			}
		})
	}
}

// readTar returns the regular files of a tar (by name) and every entry's name and mode.
func readTar(t *testing.T, b []byte) (map[string][]byte, map[string]int64) {
	t.Helper()
	files, modes := map[string][]byte{}, map[string]int64{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, modes
		}
		if err != nil {
			t.Fatalf("read tar: %v", err)
		}
		modes[h.Name] = h.Mode
		if h.Typeflag == tar.TypeReg {
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatalf("read %s: %v", h.Name, err)
			}
			files[h.Name] = data
		}
	}
}

func TestArchive(t *testing.T) {
	spec := Spec{Name: "localhost/demo:1", User: "65532:65532", Entrypoint: []string{"/bin/demo", "serve"},
		Files: []File{{Path: "/bin/demo", Mode: 0o755, Data: []byte("binary")}}}
	b, err := Archive(spec)
	if err != nil {
		t.Fatalf("Archive() = %v", err)
	}
	outer, _ := readTar(t, b)
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(outer["manifest.json"], &manifest); err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	if len(manifest) != 1 || !reflect.DeepEqual(manifest[0].RepoTags, []string{spec.Name}) || len(manifest[0].Layers) != 1 {
		t.Fatalf("manifest = %+v, want one image %q with one layer", manifest, spec.Name)
	}
	cfgBytes := outer[manifest[0].Config]
	if sum := sha256.Sum256(cfgBytes); manifest[0].Config != hex.EncodeToString(sum[:])+".json" {
		t.Errorf("config name %s is not the digest of its content", manifest[0].Config)
	}
	var cfg struct {
		Config struct {
			Entrypoint []string
			User       string
		} `json:"config"`
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	if err := json.Unmarshal(cfgBytes, &cfg); err != nil {
		t.Fatalf("config: %v", err)
	}
	if !reflect.DeepEqual(cfg.Config.Entrypoint, spec.Entrypoint) || cfg.Config.User != spec.User {
		t.Errorf("config = %+v, want entrypoint %q user %q", cfg.Config, spec.Entrypoint, spec.User)
	}
	layer := outer[manifest[0].Layers[0]]
	if sum := sha256.Sum256(layer); len(cfg.RootFS.DiffIDs) != 1 || cfg.RootFS.DiffIDs[0] != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Errorf("diff_ids = %v, want the layer's digest", cfg.RootFS.DiffIDs)
	}
	files, modes := readTar(t, layer)
	if string(files["bin/demo"]) != "binary" || modes["bin/demo"] != 0o755 {
		t.Errorf("bin/demo = %q mode %o, want %q mode 755", files["bin/demo"], modes["bin/demo"], "binary")
	}
	for name, mode := range map[string]int64{"tmp/": 0o1777, "bin/": 0o755, "etc/": 0o755, "etc/passwd": 0o644, "etc/group": 0o644} {
		if got, ok := modes[name]; !ok || got != mode {
			t.Errorf("layer entry %s: mode %o present %v, want mode %o", name, got, ok, mode)
		}
	}
	if len(modes) != 6 {
		t.Errorf("layer has %d entries (%v), want 6", len(modes), modes)
	}
	again, err := Archive(spec)
	if err != nil || !bytes.Equal(again, b) {
		t.Errorf("a second Archive of the same spec differs (err %v): the image is not reproducible", err)
	}
}

func TestRun(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "demo")
	if err := os.WriteFile(bin, []byte("binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "demo.tar")
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr bool
	}{
		{"ok", []string{"-name", "d:1", "-out", out, "-file", bin + ":/demo", "-entrypoint", "/demo"}, false},
		{"no out", []string{"-name", "d:1", "-file", bin + ":/demo", "-entrypoint", "/demo"}, true},
		{"missing source", []string{"-name", "d:1", "-out", out + "2", "-file", bin + "x:/demo", "-entrypoint", "/demo"}, true},
		{"no dest", []string{"-name", "d:1", "-out", out + "2", "-file", bin, "-entrypoint", "/demo"}, true},
		{"bad spec", []string{"-out", out + "2", "-file", bin + ":/demo", "-entrypoint", "/demo"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := run(tc.args); (err != nil) != tc.wantErr {
				t.Errorf("run(%q) = %v, want error %v", tc.args, err, tc.wantErr)
			}
		})
	}
	if _, err := os.Stat(out + "2"); !os.IsNotExist(err) {
		t.Errorf("a failed run left %s behind (stat: %v)", out+"2", err)
	}
	if _, err := os.Stat(out); err != nil {
		t.Errorf("the good run wrote no %s: %v", out, err)
	}
}
