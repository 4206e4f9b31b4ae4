package cli

import (
	"flag"
	"testing"
)

func TestApplyEnvPrecedence(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	a := fs.String("raft-addr", "default", "")
	b := fs.String("http-addr", "default", "")
	c := fs.String("data-dir", "default", "")
	n := fs.Int("count", 1, "")
	t.Setenv("TMMU_RAFT_ADDR", "from-env")
	t.Setenv("TMMU_HTTP_ADDR", "from-env")
	if err := fs.Parse([]string{"--http-addr", "from-flag"}); err != nil {
		t.Fatal(err)
	}
	if err := ApplyEnv(fs); err != nil {
		t.Fatal(err)
	}
	if *a != "from-env" || *b != "from-flag" || *c != "default" || *n != 1 {
		t.Fatalf("raft-addr %q http-addr %q data-dir %q count %d", *a, *b, *c, *n)
	}
	t.Setenv("TMMU_COUNT", "many")
	if err := ApplyEnv(fs); err == nil {
		t.Fatal("an unparsable TMMU_COUNT was accepted")
	}
	if EnvName("lease-ttl") != "TMMU_LEASE_TTL" {
		t.Fatal(EnvName("lease-ttl"))
	}
}
