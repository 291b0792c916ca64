package main

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/api/v3/version"
)

// describeSetup returns the lines of the report's setup section.
func describeSetup(o options) []string {
	return []string{
		"run " + startedAt(time.Now()),
		fmt.Sprintf("Go %s %s/%s, GOMAXPROCS %d", strings.TrimPrefix(runtime.Version(), "go"), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0)),
		fmt.Sprintf("CPU: nproc %d, %s", runtime.NumCPU(), cpuModel()),
		fmt.Sprintf("memory: %s", memTotal()),
		fmt.Sprintf("etcd %s embedded (go.etcd.io/etcd/server/v3/embed), one member, loopback, fsync on; data in %s (%s)",
			version.Version, os.TempDir(), fsType(os.TempDir())),
		"client and server in this one process; one etcd client and one session per contender, for both engines",
		fmt.Sprintf("session TTL %v (both engines); hold 0 (release right after acquire returns)", o.ttl),
		fmt.Sprintf("uncontended: %d measured cycles per engine; every other row: %v measured per engine; each split into %d rounds "+
			"(10 warm-up cycles or a fresh start each), the engines alternating which runs first",
			(o.cycles+o.rounds-1)/o.rounds*o.rounds, o.duration, o.rounds),
		"fresh sessions every round; etcd history compacted after every round",
	}
}

func cpuModel() string {
	if v := procField("/proc/cpuinfo", "model name"); v != "" {
		return v
	}
	return "model unknown"
}

func memTotal() string {
	v := procField("/proc/meminfo", "MemTotal")
	var kb int64
	if _, err := fmt.Sscanf(v, "%d kB", &kb); err != nil {
		return "unknown"
	}
	return fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
}

// procField returns the value of the first "name: value" line of a /proc
// file, or "".
func procField(path, name string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == name {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// fsType names the file system of dir: fsync on tmpfs costs nothing, so the
// reader needs to know.
func fsType(dir string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return "file system unknown"
	}
	names := map[int64]string{
		0xEF53: "ext4", 0x58465342: "xfs", 0x9123683E: "btrfs", 0x01021994: "tmpfs: fsync is free",
		0x794c7630: "overlayfs", 0x6969: "nfs", 0x2fc12fc1: "zfs",
	}
	if n, ok := names[st.Type]; ok {
		return n
	}
	return fmt.Sprintf("file system 0x%x", st.Type)
}

// machineLoad describes what else the machine is doing: the 1-minute load
// average and the share of the last minute some task waited on I/O. Other
// processes' disk and CPU use move these numbers more than anything here.
func machineLoad() string {
	load := "load average unknown"
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			load = "load average " + f[0]
		}
	}
	io := "I/O pressure unknown"
	if b, err := os.ReadFile("/proc/pressure/io"); err == nil {
		for _, f := range strings.Fields(string(b)) {
			if v, ok := strings.CutPrefix(f, "avg60="); ok {
				io = "I/O pressure " + v + "%"
				break
			}
		}
	}
	return load + ", " + io
}

// startedAt is the report's date line.
func startedAt(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") }
