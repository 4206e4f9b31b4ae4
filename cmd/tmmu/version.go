package main

import (
	"fmt"
	"runtime/debug"
)

var versionCmd = &command{
	name:    "version",
	summary: "Print tmmu's version: the module version, the commit it was built from and the Go toolchain.",
	usage:   "version [-o text|json]",
	run:     runVersion,
}

func runVersion(c *command, e *env, args []string) error {
	fs := newFlags(e, c)
	out := fs.String("o", "text", "output: text or json")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := outputFormat(e, *out, "text", "json"); err != nil {
		return err
	}
	if len(pos) != 0 {
		return usagef("version takes no arguments")
	}
	v := struct {
		Version  string `json:"version"`
		Commit   string `json:"commit,omitempty"`
		Modified bool   `json:"modified,omitempty"`
		Go       string `json:"go"`
	}{Version: "(unknown)"}
	if bi, ok := debug.ReadBuildInfo(); ok {
		v.Version, v.Go = bi.Main.Version, bi.GoVersion
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Commit = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	if *out == "json" {
		return writeJSON(e.stdout, v)
	}
	fmt.Fprintf(e.stdout, "tmmu %s", v.Version)
	if v.Commit != "" {
		fmt.Fprintf(e.stdout, " commit %s", v.Commit)
		if v.Modified {
			fmt.Fprint(e.stdout, " (modified)")
		}
	}
	fmt.Fprintf(e.stdout, " %s\n", v.Go)
	return nil
}
