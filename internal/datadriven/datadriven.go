// Package datadriven runs scenario files: each case is a command line, a
// line "----", and the expected output up to a blank line. With the
// -rewrite flag the files are rewritten with the actual output. It is a
// small cousin of cockroachdb/datadriven, which etcd-io/raft uses.
//
//	# a comment
//	observe rank=3 step=41 seq=2048
//	----
//	accepted
//
// Expected output that contains blank lines is not supported.
package datadriven

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite datadriven scenario files with the actual output")

// Cmd is one command of a scenario.
type Cmd struct {
	Name string
	Pos  []string          // positional arguments
	Args map[string]string // key=value arguments
	Line int
}

// Arg returns a key=value argument and whether it was given.
func (c *Cmd) Arg(key string) (string, bool) {
	v, ok := c.Args[key]
	return v, ok
}

// Walk runs fn on every *.txt file under dir as a subtest.
func Walk(t *testing.T, dir string, fn func(t *testing.T, path string)) {
	files, err := filepath.Glob(filepath.Join(dir, "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no scenarios in %s", dir)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) { fn(t, f) })
	}
}

// Run runs every case of the file at path through do and compares (or,
// with -rewrite, replaces) the expected output.
func Run(t *testing.T, path string, do func(*Cmd) string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	var out strings.Builder
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			out.WriteString(line + "\n")
			continue
		}
		cmd := parse(trimmed, i+1)
		if i+1 >= len(lines) || strings.TrimSpace(lines[i+1]) != "----" {
			t.Fatalf("%s:%d: %q is not followed by ----", path, i+1, trimmed)
		}
		i += 2
		var want []string
		for ; i < len(lines) && strings.TrimSpace(lines[i]) != ""; i++ {
			want = append(want, lines[i])
		}
		got := strings.TrimRight(do(cmd), "\n")
		if !*rewrite && got != strings.Join(want, "\n") {
			t.Errorf("%s:%d: %s\nwant:\n%s\ngot:\n%s", path, cmd.Line, trimmed, strings.Join(want, "\n"), got)
		}
		out.WriteString(line + "\n----\n")
		if got != "" {
			out.WriteString(got + "\n")
		}
		if i < len(lines) {
			out.WriteString("\n")
		}
	}
	if *rewrite {
		if err := os.WriteFile(path, []byte(strings.TrimRight(out.String(), "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func parse(line string, n int) *Cmd {
	f := strings.Fields(line)
	c := &Cmd{Name: f[0], Args: map[string]string{}, Line: n}
	for _, a := range f[1:] {
		if k, v, ok := strings.Cut(a, "="); ok {
			c.Args[k] = v
		} else {
			c.Pos = append(c.Pos, a)
		}
	}
	return c
}

// Errorf formats an error line for expected output.
func Errorf(format string, args ...any) string { return "error: " + fmt.Sprintf(format, args...) }
