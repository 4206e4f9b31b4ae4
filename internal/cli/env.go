// Package cli holds what the tmmu daemons and the CLI share for settings:
// flags whose defaults come from TMMU_* environment variables.
package cli

import (
	"flag"
	"os"
	"strings"
)

// EnvName returns the environment variable for a flag: TMMU_ and the flag
// name upper-cased with '-' as '_' ("raft-addr" → TMMU_RAFT_ADDR).
func EnvName(flagName string) string {
	return "TMMU_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// ApplyEnv sets every flag of fs that was not given on the command line
// from its environment variable, when that is set: flags win over the
// environment, which wins over the defaults. It returns the first value
// that does not parse.
func ApplyEnv(fs *flag.FlagSet) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || given[f.Name] {
			return
		}
		if v, ok := os.LookupEnv(EnvName(f.Name)); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = e
			}
		}
	})
	return err
}
