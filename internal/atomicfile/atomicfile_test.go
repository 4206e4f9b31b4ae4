package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "a.json")
	if err := Write(file, []byte("one"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := Write(file, []byte("two"), 0o640); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(file)
	fi, _ := os.Stat(file)
	if err != nil || string(got) != "two" || fi.Mode().Perm() != 0o640 {
		t.Fatalf("read %q (%v), mode %v", got, err, fi.Mode())
	}
	// A write that cannot finish leaves the old file and no temporary.
	if err := Write(filepath.Join(dir, "missing", "b"), []byte("x"), 0o644); err == nil {
		t.Fatal("a write into a missing directory succeeded")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("the directory holds %d entries, want 1", len(entries))
	}
}
