package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// writeToken replaces path with the token in decimal and a newline, or with an empty file for
// token 0, atomically: a temporary file in the same folder, synced, then renamed over path,
// so a reader sees the old content or the new, never a part. The file is world-readable
// (0644): the token is not a secret, it is what the holder shows the resources it writes.
func writeToken(path string, token int64) error {
	var data []byte
	if token != 0 {
		data = []byte(strconv.FormatInt(token, 10) + "\n")
	}
	return replaceFile(path, "token", data)
}

// writeSlot replaces path with the slot index in decimal and a newline (slot 0 included), or
// with an empty file for a negative slot (no term), as writeToken does.
func writeSlot(path string, slot int) error {
	var data []byte
	if slot >= 0 {
		data = []byte(strconv.Itoa(slot) + "\n")
	}
	return replaceFile(path, "slot", data)
}

// replaceFile replaces path with data atomically; what names the file in errors.
func replaceFile(path, what string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s file: %w", what, err)
	}
	name := tmp.Name()
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		_ = os.Remove(name)
		return fmt.Errorf("write %s file: %w", what, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		_ = tmp.Close()
		_ = os.Remove(name)
		return fmt.Errorf("write %s file: %w", what, err)
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		_ = os.Remove(name)
		return fmt.Errorf("write %s file: %w", what, err)
	}
	if err := tmp.Close(); err != nil {
		_ = os.Remove(name)
		return fmt.Errorf("write %s file: %w", what, err)
	}
	if err := os.Rename(name, path); err != nil {
		_ = os.Remove(name)
		return fmt.Errorf("write %s file: %w", what, err)
	}
	return nil
}
