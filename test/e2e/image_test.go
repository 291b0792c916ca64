//go:build e2e

package e2e

import (
	"archive/tar"
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// dockerStage is what the final stage of a Dockerfile declares about the image.
type dockerStage struct {
	From       string
	User       string
	Entrypoint []string
	Copies     []string // destination paths of COPY in the final stage
}

// parseDockerfile reads the final stage's FROM, USER, ENTRYPOINT (exec form) and COPY
// destinations. Line continuations and other instructions are not needed by our Dockerfiles
// and are reported as errors when they would change the answer.
func parseDockerfile(text string) (dockerStage, error) {
	var st dockerStage
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			return st, fmt.Errorf("line continuation in %q is not supported", line)
		}
		instr, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(instr) {
		case "FROM":
			st = dockerStage{From: strings.Fields(rest)[0]}
		case "USER":
			st.User = rest
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &st.Entrypoint); err != nil {
				return st, fmt.Errorf("ENTRYPOINT %s: only the exec form is supported: %w", rest, err)
			}
		case "COPY":
			f := strings.Fields(rest)
			st.Copies = append(st.Copies, f[len(f)-1])
		}
	}
	if st.From == "" {
		return st, errors.New("no FROM")
	}
	return st, nil
}

// imageArchive is what a docker-archive tarball holds.
type imageArchive struct {
	RepoTags   []string
	Entrypoint []string
	User       string
	Files      map[string]int64 // layer path -> mode
}

// readImageArchive reads a single-image docker-archive (manifest.json, config, layers).
func readImageArchive(path string) (imageArchive, error) {
	var img imageArchive
	b, err := os.ReadFile(path)
	if err != nil {
		return img, err
	}
	outer, err := tarFiles(b)
	if err != nil {
		return img, fmt.Errorf("read %s: %w", path, err)
	}
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(outer["manifest.json"], &manifest); err != nil {
		return img, fmt.Errorf("read %s: manifest.json: %w", path, err)
	}
	if len(manifest) != 1 {
		return img, fmt.Errorf("read %s: manifest.json holds %d images, want 1", path, len(manifest))
	}
	var cfg struct {
		Config struct {
			Entrypoint []string
			User       string
		} `json:"config"`
	}
	if err := json.Unmarshal(outer[manifest[0].Config], &cfg); err != nil {
		return img, fmt.Errorf("read %s: config: %w", path, err)
	}
	img = imageArchive{RepoTags: manifest[0].RepoTags, Entrypoint: cfg.Config.Entrypoint, User: cfg.Config.User, Files: map[string]int64{}}
	for _, l := range manifest[0].Layers {
		tr := tar.NewReader(bytes.NewReader(outer[l]))
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return img, fmt.Errorf("read %s: layer %s: %w", path, l, err)
			}
			if h.Typeflag == tar.TypeReg {
				img.Files["/"+h.Name] = h.Mode
			}
		}
	}
	return img, nil
}

func tarFiles(b []byte) (map[string][]byte, error) {
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return nil, err
		}
		if files[h.Name], err = io.ReadAll(tr); err != nil {
			return nil, err
		}
	}
}

// TestImagesMatchDockerfiles: `make image` (no Docker) and each Dockerfile produce the same
// entrypoint, user and files. The images add only what distroless/static:nonroot, the
// Dockerfiles' base, would have given the binary: /etc/passwd and /etc/group.
func TestImagesMatchDockerfiles(t *testing.T) {
	root := repoRoot(t)
	for _, tc := range []struct{ dockerfile, tarball string }{
		{"Dockerfile", "bin/images/lockwarden.tar"},
		{"examples/fenced-worker/Dockerfile", "bin/images/fenced-worker.tar"},
		{"cmd/lockwarden-agent/Dockerfile", "bin/images/lockwarden-agent.tar"},
	} {
		t.Run(tc.dockerfile, func(t *testing.T) {
			text, err := os.ReadFile(filepath.Join(root, tc.dockerfile))
			if err != nil {
				t.Fatal(err)
			}
			want, err := parseDockerfile(string(text))
			if err != nil {
				t.Fatalf("parse %s: %v", tc.dockerfile, err)
			}
			if !strings.HasPrefix(want.From, "gcr.io/distroless/static") {
				t.Fatalf("%s's final stage is FROM %s: the distroless base files below no longer hold", tc.dockerfile, want.From)
			}
			got, err := readImageArchive(filepath.Join(root, tc.tarball))
			if errors.Is(err, os.ErrNotExist) {
				t.Fatalf("%s not found: run `make image`", tc.tarball)
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Entrypoint, want.Entrypoint) {
				t.Errorf("%s entrypoint = %q, %s says %q", tc.tarball, got.Entrypoint, tc.dockerfile, want.Entrypoint)
			}
			if got.User != want.User {
				t.Errorf("%s user = %q, %s says %q", tc.tarball, got.User, tc.dockerfile, want.User)
			}
			wantFiles := append([]string{"/etc/group", "/etc/passwd"}, want.Copies...)
			var gotFiles []string
			for f := range got.Files {
				gotFiles = append(gotFiles, f)
			}
			sort.Strings(wantFiles)
			sort.Strings(gotFiles)
			if !reflect.DeepEqual(gotFiles, wantFiles) {
				t.Errorf("%s files = %q, want %q (%s's COPY destinations and the base's passwd/group)", tc.tarball, gotFiles, wantFiles, tc.dockerfile)
			}
			for _, c := range want.Copies {
				if got.Files[c]&0o111 == 0 {
					t.Errorf("%s: %s has mode %o, want it executable", tc.tarball, c, got.Files[c])
				}
			}
		})
	}
}

func TestParseDockerfile(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       dockerStage
		wantErr    bool
	}{
		{"final stage only", "FROM a AS b\nUSER 1\nCOPY x /x\nFROM c\nCOPY --from=b /o /y\nUSER 2:2\nENTRYPOINT [\"/y\", \"-v\"]\n",
			dockerStage{From: "c", User: "2:2", Entrypoint: []string{"/y", "-v"}, Copies: []string{"/y"}}, false},
		{"shell form", "FROM c\nENTRYPOINT /y -v\n", dockerStage{}, true},
		{"continuation", "FROM c\nCOPY a \\\n /b\n", dockerStage{}, true},
		{"no from", "USER 1\n", dockerStage{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseDockerfile(tc.text)
			if (err != nil) != tc.wantErr {
				t.Fatalf("parseDockerfile() error = %v, want error %v", err, tc.wantErr)
			}
			if !tc.wantErr && !reflect.DeepEqual(got, tc.want) {
				t.Errorf("parseDockerfile() = %+v, want %+v", got, tc.want)
			}
		})
	}
}
