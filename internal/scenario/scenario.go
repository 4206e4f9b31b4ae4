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

// Errorf formats an error line for expected output.
func Errorf(format string, args ...any) string { return "error: " + fmt.Sprintf(format, args...) }
