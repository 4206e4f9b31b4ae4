package onnx

import (
	"slices"
	"strings"
	"testing"
)

func TestEinsumShape(t *testing.T) {
	in := func(shapes ...[]uint64) []*tensorInfo {
		var ts []*tensorInfo
		for _, s := range shapes {
			ts = append(ts, &tensorInfo{shape: s, known: true})
		}
		return ts
	}
	cases := []struct {
		eq     string
		in     []*tensorInfo
		want   []uint64
		refuse string
	}{
		{"ij,jk->ik", in([]uint64{2, 3}, []uint64{3, 5}), []uint64{2, 5}, ""},
		{"ij,jk", in([]uint64{2, 3}, []uint64{3, 5}), []uint64{2, 5}, ""},
		{"ba", in([]uint64{2, 3}), []uint64{3, 2}, ""},
		{"ii->i", in([]uint64{4, 4}), []uint64{4}, ""},
		{"ij->", in([]uint64{4, 4}), nil, ""},
		{"...ij,...jk->...ik", in([]uint64{7, 1, 2, 3}, []uint64{4, 3, 5}), []uint64{7, 4, 2, 5}, ""},
		{"i...,i", in([]uint64{3, 4, 5}, []uint64{3}), []uint64{4, 5}, ""},
		{"BGHID,BGHJD->BGHIJ", in([]uint64{1, 1, 2, 9, 4}, []uint64{1, 1, 2, 9, 4}), []uint64{1, 1, 2, 9, 9}, ""},
		{"ij,jk->ik", in([]uint64{2, 3}, []uint64{4, 5}), nil, "is 3 in one input and 4"},
		{"ij,jk->il", in([]uint64{2, 3}, []uint64{3, 5}), nil, "names no input axis"},
		{"ijk->i", in([]uint64{2, 3}), nil, "does not fit input 0 of rank 2"},
		{"ij", in([]uint64{2, 3}, []uint64{3}), nil, "names 1 inputs, the node has 2"},
		{"", in([]uint64{2}), nil, "names 1 inputs"},
		{"i1->i", in([]uint64{2, 3}), nil, "not a subscript letter"},
	}
	for _, c := range cases {
		got, err := einsumShape(c.eq, c.in)
		if c.refuse != "" {
			if err == nil || !strings.Contains(err.Error(), c.refuse) {
				t.Errorf("%q: got %v, %v; want an error mentioning %q", c.eq, got, err, c.refuse)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%q: got %v, %v; want %v", c.eq, got, err, c.want)
		}
	}
}
