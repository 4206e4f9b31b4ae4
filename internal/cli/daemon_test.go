package cli

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
)

// TestMainHelp: -h and --help print the flags and exit 0; a failure of
// the daemon exits 1 with its name.
func TestMainHelp(t *testing.T) {
	run := func(args []string, stderr io.Writer) error {
		fs := flag.NewFlagSet("d", flag.ContinueOnError)
		fs.SetOutput(stderr)
		fs.String("id", "", "this node's id")
		if err := fs.Parse(args); err != nil {
			return err
		}
		return errors.New("no peers")
	}
	for _, c := range []struct {
		args   []string
		status int
		want   string
	}{
		{[]string{"-h"}, 0, "-id string"},
		{[]string{"--help"}, 0, "-id string"},
		{[]string{"--id", "x"}, 1, "d: no peers"},
		{[]string{"--nope"}, 1, "flag provided but not defined"},
	} {
		var stderr bytes.Buffer
		if got := Main("d", c.args, &stderr, run); got != c.status || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v: exit %d, %q; want %d and %q", c.args, got, stderr.String(), c.status, c.want)
		}
	}
}
