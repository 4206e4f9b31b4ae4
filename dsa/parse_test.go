package dsa_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/tmmu/tmmu/dsa"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/planner"
	"github.com/tmmu/tmmu/planner/pack"
)

func TestParseErrors(t *testing.T) {
	for _, c := range []struct{ csv, mention string }{
		{"", "header"},
		{"id,start,end,size\n", "header"},
		{"id,lower,upper,size\n", "no buffers"},
		{"id,lower,upper,size\na,0,1\n", "wrong number of fields"},
		{"id,lower,upper,size\na,0,1,8\na,1,2,8\n", `id "a" repeats line 2`},
		{"id,lower,upper,size\na,3,3,8\n", "line 2: buffer \"a\" lives over [3,3)"},
		{"id,lower,upper,size\na,0,1,0\n", "size 0"},
		{"id,lower,upper,size\na,x,1,8\n", `lower "x"`},
		{"id,lower,upper,size\na,0,1,-8\n", `size "-8"`},
		{"id,lower,upper,size\n,0,1,8\n", "empty id"},
	} {
		_, err := dsa.Parse("t.csv", strings.NewReader(c.csv))
		if !errors.Is(err, dsa.ErrFormat) || !strings.Contains(err.Error(), c.mention) {
			t.Errorf("%q: %v, want ErrFormat mentioning %q", c.csv, err, c.mention)
		}
	}
}

// TestModelMatchesInstance: the graph of an instance places each buffer
// over exactly the positions it is live at, so the planner meets two
// buffers exactly when their intervals intersect.
func TestModelMatchesInstance(t *testing.T) {
	csv := "id,lower,upper,size\na,0,10,4\nb,10,20,4\nc,5,15,2\nd,12,13,1\ne,19,40,8\n"
	in, err := dsa.Parse("t.csv", strings.NewReader(csv))
	if err != nil {
		t.Fatal(err)
	}
	p, g, err := in.Plan(planner.Packed, pack.Exact)
	if err != nil {
		t.Fatal(err)
	}
	if err := planner.Verify(g, p); err != nil {
		t.Fatal(err)
	}
	live := map[string][2]int32{}
	for _, tp := range p.Tensors {
		live[tp.ID] = tp.Lifetime
	}
	meets := func(x, y dsa.Buffer) bool { return x.Lower < y.Upper && y.Lower < x.Upper }
	for _, x := range in.Buffers {
		for _, y := range in.Buffers {
			a, b := live[x.ID], live[y.ID]
			if got := a[0] <= b[1] && b[0] <= a[1]; got != meets(x, y) {
				t.Errorf("%s %v and %s %v: planner meets=%v, instance meets=%v", x.ID, a, y.ID, b, got, meets(x, y))
			}
		}
	}
	// a,c live together (6 bytes), then b,c,d (7 bytes), then b,e (12 bytes).
	if lb := p.Arenas[0].LowerBoundBytes; lb != 12 || p.Arenas[0].PeakBytes != 12 {
		t.Fatalf("lower bound %d, peak %d; want 12 and 12", lb, p.Arenas[0].PeakBytes)
	}
	if p.Arenas[0].Name != ir.ArenaActivations {
		t.Fatalf("arena %s", p.Arenas[0].Name)
	}
	rows, err := in.Rows(p)
	if err != nil || len(rows) != 5 || rows[4].ID != "e" || rows[4].Lifetime != [2]int64{19, 40} {
		t.Fatalf("rows %v, %v", rows, err)
	}
}

// TestWriteParses: Write's CSV parses back to the same instance, ids
// that need quoting and extreme values included.
func TestWriteParses(t *testing.T) {
	in := &dsa.Instance{Name: "w", Buffers: []dsa.Buffer{
		{ID: "a", Lower: 0, Upper: 3, Size: 8},
		{ID: `b,"c"`, Lower: -1 << 63, Upper: 1<<63 - 1, Size: 1<<64 - 1},
	}}
	var b strings.Builder
	if err := in.Write(&b); err != nil {
		t.Fatal(err)
	}
	back, err := dsa.ParseBytes("w", []byte(b.String()))
	if err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	if !slices.Equal(back.Buffers, in.Buffers) {
		t.Errorf("wrote %+v, read back %+v", in.Buffers, back.Buffers)
	}
}
