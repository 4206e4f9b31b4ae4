package api

import (
	"os/exec"
	"strings"
	"testing"
)

// TestWorkerLinksNoRaft: a worker binary, and this package, link neither
// raft nor bolt (the split between coord and coord/api).
func TestWorkerLinksNoRaft(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	for _, pkg := range []string{"github.com/tmmu/tmmu/coord/api", "github.com/tmmu/tmmu/cmd/worker"} {
		out, err := exec.Command(gobin, "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			if strings.Contains(dep, "hashicorp/raft") || strings.Contains(dep, "bbolt") || dep == "github.com/tmmu/tmmu/coord" {
				t.Errorf("%s depends on %s", pkg, dep)
			}
		}
	}
}
