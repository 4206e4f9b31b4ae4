package planner

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
)

func TestParseByteSize(t *testing.T) {
	for in, want := range map[string]ByteSize{
		"0": 0, "512": 512, "64KiB": 64 << 10, "80GiB": 80 << 30, "1.5GB": 1_500_000_000,
		"2 MiB": 2 << 20, "7B": 7, "1TB": 1e12,
	} {
		got, err := ParseByteSize(in)
		if err != nil || got != want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "1.5B", "lots", "99999999999999999999", "17179869184TiB"} {
		if _, err := ParseByteSize(in); err == nil {
			t.Errorf("ParseByteSize(%q) succeeded", in)
		}
	}
	var c ArenaConfig
	if err := json.Unmarshal([]byte(`{"activations":{"capacity_bytes":"1GiB","alignment_bytes":256}}`), &c); err != nil {
		t.Fatal(err)
	}
	if c["activations"].CapacityBytes != 1<<30 || c["activations"].AlignmentBytes != 256 {
		t.Fatalf("%+v", c)
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1024: "1.00 KiB", 3 << 29: "1.50 GiB"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// Resolve reports every problem at once and fills defaults.
func TestResolveReportsAll(t *testing.T) {
	_, err := ArenaConfig{
		"bogus":       {},
		"activations": {AlignmentBytes: 3},
		"gradients":   {PageSize: 1000},
	}.Resolve()
	if !errors.Is(err, failure.InvalidOptions) {
		t.Fatalf("first problem should be the unknown arena: %v", err)
	}
	for _, want := range []string{"bogus", "alignment_bytes 3", "page_size 1000"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	c, err := ArenaConfig{}.Resolve()
	if err != nil || len(c) != 5 || c["parameters"].AlignmentBytes != DefaultAlignment {
		t.Fatalf("defaults: %v %v", c, err)
	}
	if c.Hash() != (ArenaConfig{"parameters": {AlignmentBytes: 128}}).mustResolve(t).Hash() {
		t.Fatal("explicit defaults hash differently from implicit ones")
	}
}

func (c ArenaConfig) mustResolve(t *testing.T) ArenaConfig {
	r, err := c.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestSelectsMatchesPhases(t *testing.T) {
	for _, m := range Modes {
		for _, p := range []ir.Phase{"", ir.Forward, ir.Backward, ir.Optimizer} {
			if got, want := m.selects(p), slices.Contains(m.Phases(), p.Norm()); got != want {
				t.Errorf("%s.selects(%q) = %v, Phases says %v", m, p, got, want)
			}
		}
	}
}
