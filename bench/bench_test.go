package bench

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/planner/pack"
)

func TestParseMethods(t *testing.T) {
	ms, err := ParseMethods("slots, greedy-size,packed,packed:exact")
	if err != nil || len(ms) != 4 || ms[2].Effort != pack.Fast || ms[3].String() != "packed:exact" {
		t.Fatalf("%v %v", ms, err)
	}
	for _, bad := range []string{"", "bogus", "slots:exact", "packed:hard"} {
		if _, err := ParseMethods(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// TestMeasureDir runs a suite directory with a DSA instance and an IR
// graph: every run verifies, packed reaches the lower bound of the small
// instance and slots does not.
func TestMeasureDir(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "tiny.csv"), []byte("id,lower,upper,size\na,0,2,8\nb,0,4,2\nc,2,4,4\nd,2,4,4\n"), 0o644)
	chain, err := os.ReadFile("../cmd/tmmu/testdata/bad/chain.json")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "chain.json"), chain, 0o644)
	insts, err := Suite(dir)
	if err != nil || len(insts) != 2 {
		t.Fatalf("suite: %d instances, %v", len(insts), err)
	}
	var results []Result
	for _, in := range insts {
		r := Measure(in, DefaultMethods)
		for _, run := range r.Runs {
			if !run.Verified || run.Error != "" {
				t.Fatalf("%s %s: %+v", r.Instance, run.Method, run)
			}
		}
		results = append(results, r)
	}
	tiny := results[1]
	// Slots sizes slot 0 for a (8 bytes), then gives it to c (4) and puts
	// d in a third slot: 14 bytes. Packed stacks b, then a beside c and d.
	if tiny.Instance != "tiny" || tiny.Buffers != 4 || tiny.LowerBound != 10 {
		t.Fatalf("tiny: %+v", tiny)
	}
	if slots, packed := tiny.Runs[0], tiny.Runs[2]; slots.Peak != 14 || packed.Method != "packed" || packed.Peak != 10 {
		t.Fatalf("slots %+v, packed %+v", slots, packed)
	}
	sum := Summarize(results, DefaultMethods)
	if len(sum) != 3 || sum[2].Verified != 2 || sum[2].AtLowerBound < 1 {
		t.Fatalf("summary %+v", sum)
	}
}

func TestEmbeddedSuite(t *testing.T) {
	if testing.Short() {
		t.Skip("plans Llama-2-7B")
	}
	insts, err := Suite("")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, in := range insts {
		names[in.Name] = true
	}
	for _, want := range []string{"minimalloc-A", "minimalloc-F", "somas-resnet50", "iopddl-G_1", "iopddl-S_1", "gpt2-small-train_full", "llama-7b-inference"} {
		if !names[want] {
			t.Errorf("suite lacks %s", want)
		}
	}
}

// TestFamiliesByName: "families:" with a list keeps those families
// alone, in the suite's order (spaces around names and empty entries are
// skipped); an unknown one, or none, is an invalid option that names it
// and lists the families.
func TestFamiliesByName(t *testing.T) {
	insts, err := Suite(FamiliesSuite + ":coarse, holed,")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, in := range insts {
		names = append(names, in.Name)
	}
	if len(insts) != 20 || names[0] != "coarse-100-s0" || names[19] != "holed-5000-s1" {
		t.Fatalf("%d instances: %v", len(insts), names)
	}
	_, err = Suite(FamiliesSuite + ":coarse,nope")
	if failure.CodeOf(err) != failure.InvalidOptions || !strings.Contains(err.Error(), `"nope"`) || !strings.Contains(err.Error(), "perfect, halving") {
		t.Fatalf("unknown family: %v", err)
	}
	for _, none := range []string{":", ": , "} {
		if _, err := Suite(FamiliesSuite + none); failure.CodeOf(err) != failure.InvalidOptions || !strings.Contains(err.Error(), "no families named") {
			t.Fatalf("%q: %v", FamiliesSuite+none, err)
		}
	}
}

// TestSelectionNamesTheCulprit: a size no family takes names the sizes;
// too many instances name the sizes and the number of seeds (not the
// suite, which is not at fault); an unknown family names the suite.
func TestSelectionNamesTheCulprit(t *testing.T) {
	many := make([]uint64, 60_000)
	for _, c := range []struct {
		suite string
		sizes []int
		seeds []uint64
		diags map[string]string
	}{
		{FamiliesSuite + ":coarse", []int{100, 0}, nil, map[string]string{"sizes": "100, 0"}},
		{FamiliesSuite + ":perfect", []int{1, 2}, many, map[string]string{"sizes": "1, 2", "seeds": "60000 seeds"}},
		{FamiliesSuite + ":perfect,coarse", nil, many, map[string]string{"sizes": "the suite's", "seeds": "60000 seeds"}},
		{FamiliesSuite + ":nope", nil, nil, map[string]string{"suite": FamiliesSuite + ":nope"}},
	} {
		_, ok, err := Selection(c.suite, c.sizes, c.seeds)
		fe, isFailure := errors.AsType[*failure.Error](err)
		if !ok || !isFailure || fe.Code != failure.InvalidOptions || !maps.Equal(fe.Diagnostics, c.diags) {
			t.Errorf("Selection(%q, %v, %d seeds): ok %v, %v; want diagnostics %v", c.suite, c.sizes, len(c.seeds), ok, err, c.diags)
		}
	}
}

// TestParseCounts: numbers and inclusive ranges, each number once in the
// order first given, spaces and empty entries skipped; a malformed entry,
// a number past 2^64-1, a backward range, too many numbers or none are
// errors that name them.
func TestParseCounts(t *testing.T) {
	got, err := ParseCounts(" 7, 0-3,, 10-10, 2-8 ")
	if err != nil || !slices.Equal(got, []uint64{7, 0, 1, 2, 3, 10, 4, 5, 6, 8}) {
		t.Fatalf("ParseCounts: %v, %v", got, err)
	}
	if all, err := ParseCounts("0-99999"); err != nil || len(all) != 100000 || all[99999] != 99999 {
		t.Fatalf("ParseCounts(0-99999): %d numbers, %v", len(all), err)
	}
	for list, want := range map[string]string{
		"x":                      `"x" is not a number`,
		"1-":                     `"1-" is not a number`,
		"-1":                     `"-1" is not a number`,
		"5-2":                    `range "5-2" runs backwards`,
		"0-100000":               "more than 100000 numbers",
		"0-99999,1":              "more than 100000 numbers",
		"0-18446744073709551615": "more than 100000 numbers",
		"99999999999999999999":   `"99999999999999999999" is past 2^64-1`,
		" , ":                    "no numbers named",
	} {
		if _, err := ParseCounts(list); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseCounts(%q): %v, want %q", list, err, want)
		}
	}
}
