package pack

import (
	"cmp"
	"math/bits"
	"slices"
)

// key is a per-buffer sort key.
type key uint8

const (
	bySize     key = iota // larger first
	byLength              // longer lifetime first
	byArea                // larger size × length first
	byTotal               // busier: the most bytes live at one of its positions, first
	byStart               // earlier birth first
	byConflict            // more overlapping bytes first: the sum over its positions of bytes live
)

// features are the per-buffer values the keys compare.
type features struct {
	total    []uint64 // max over the buffer's positions of liveBytes
	pressure []uint64 // sum over its positions of liveBytes (saturating)
}

func (in *instance) features() *features {
	n := len(in.bufs)
	f := &features{total: make([]uint64, n), pressure: make([]uint64, n)}
	// Prefix sums (saturating) for pressure, a sparse table for the range
	// maximum.
	prefix := make([]uint64, len(in.liveBytes)+1)
	for t, v := range in.liveBytes {
		s, c := bits.Add64(prefix[t], v, 0)
		if c != 0 {
			s = ^uint64(0)
		}
		prefix[t+1] = s
	}
	rmq := newRangeMax(in.liveBytes)
	for i := range in.bufs {
		s, e := in.start[i], in.end[i]
		f.total[i] = rmq.max(s, e)
		if prefix[e] == ^uint64(0) {
			f.pressure[i] = ^uint64(0)
		} else {
			f.pressure[i] = prefix[e] - prefix[s]
		}
	}
	return f
}

// order returns the buffer indices sorted by keys, then by index.
func (in *instance) order(f *features, keys ...key) []int32 {
	o := make([]int32, len(in.bufs))
	for i := range o {
		o[i] = int32(i)
	}
	in.sortBy(o, f.total, f.pressure, keys)
	return o
}

// sortBy sorts bufs by keys, then by index; total and pressure give the
// byTotal and byConflict values per buffer.
func (in *instance) sortBy(bufs []int32, total, pressure []uint64, keys []key) {
	slices.SortFunc(bufs, func(x, y int32) int {
		a, b := &in.bufs[x], &in.bufs[y]
		for _, k := range keys {
			var c int
			switch k {
			case bySize:
				c = cmp.Compare(b.Size, a.Size)
			case byLength:
				c = cmp.Compare(uint64(b.End-b.Start), uint64(a.End-a.Start))
			case byArea:
				ah, al := bits.Mul64(a.Size, uint64(a.End-a.Start)) // times may span past 2^63: the difference wraps into uint64 correctly
				bh, bl := bits.Mul64(b.Size, uint64(b.End-b.Start))
				if c = cmp.Compare(bh, ah); c == 0 {
					c = cmp.Compare(bl, al)
				}
			case byTotal:
				c = cmp.Compare(total[y], total[x])
			case byStart:
				c = cmp.Compare(a.Start, b.Start)
			case byConflict:
				c = cmp.Compare(pressure[y], pressure[x])
			}
			if c != 0 {
				return c
			}
		}
		return cmp.Compare(x, y)
	})
}

// rangeMax answers maximum queries over a fixed slice (a sparse table).
type rangeMax struct{ t [][]uint64 }

func newRangeMax(v []uint64) *rangeMax {
	r := &rangeMax{t: [][]uint64{v}}
	for w := 1; 2*w <= len(v); w *= 2 {
		prev := r.t[len(r.t)-1]
		next := make([]uint64, len(prev)-w)
		for i := range next {
			next[i] = max(prev[i], prev[i+w])
		}
		r.t = append(r.t, next)
	}
	return r
}

// max returns the maximum of v[s:e]; e > s.
func (r *rangeMax) max(s, e int32) uint64 {
	k := bits.Len32(uint32(e-s)) - 1
	return max(r.t[k][s], r.t[k][e-int32(1)<<k])
}
