// Package scenario reads the commands of tmmu's datadriven scenario files
// (github.com/cockroachdb/datadriven, as etcd-io/raft uses it) in the one
// form they take: a name, bare words and key=value arguments.
//
//	# a comment
//	observe rank=3 step=41 seq=2048
//	----
//	accepted
//
// Run `go test ./PKG -rewrite` to rewrite a package's files with the
// actual output.
package scenario

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/cockroachdb/datadriven"
)

// Cmd is one command of a scenario.
type Cmd struct {
	Name string
	Pos  []string          // bare words
	Args map[string]string // key=value arguments (a list (a,b) joins to a,b)
}

// Of returns the command of d.
func Of(d *datadriven.TestData) *Cmd {
	c := &Cmd{Name: d.Cmd, Args: map[string]string{}}
	for _, a := range d.CmdArgs {
		if len(a.Vals) == 0 {
			c.Pos = append(c.Pos, a.Key)
			continue
		}
		c.Args[a.Key] = strings.Join(a.Vals, ",")
	}
	return c
}

// Arg returns a key=value argument and whether it was given.
func (c *Cmd) Arg(key string) (string, bool) {
	v, ok := c.Args[key]
	return v, ok
}

// Has reports whether the bare word w was given.
func (c *Cmd) Has(w string) bool { return slices.Contains(c.Pos, w) }

// Uint returns the unsigned integer argument key, or def when it is not
// given; a value that is not one fails the scenario (panics).
func (c *Cmd) Uint(key string, def uint64) uint64 {
	v, ok := c.Args[key]
	if !ok {
		return def
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		panic(fmt.Sprintf("scenario: %s=%q: %v", key, v, err))
	}
	return n
}

// Errorf formats an error line for expected output.
func Errorf(format string, args ...any) string { return "error: " + fmt.Sprintf(format, args...) }
