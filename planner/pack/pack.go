package pack

import (
	"fmt"
	"strings"
)

// Effort chooses how hard Pack works. Work is counted in deterministic
// units (byte ranges merged by the placer, nodes of the search), never in
// time, so every machine returns the same offsets.
type Effort string

const (
	// Fast runs a portfolio of best-fit placements under several orders
	// within a work budget and, on small instances still more than 1 %
	// above the lower bound, a short search. It is the default.
	Fast Effort = "fast"
	// Exact runs the portfolio, then a search over canonical placements
	// (see searcher) with a large node budget: first at the lower bound,
	// then by bisection between it and the best peak found.
	Exact Effort = "exact"
)

// Efforts lists the effort levels.
var Efforts = []Effort{Fast, Exact}

// Options tune Pack.
type Options struct {
	Effort Effort
	// Nodes overrides the effort's search node budget when positive.
	Nodes int64
}

// budgets per effort.
type budget struct {
	portfolio  int64 // byte ranges the placers may merge before members are skipped
	nodes      int64 // search nodes
	maxBuffers int   // search only instances this small
	maxPairs   int   // ... whose overlapping pairs fit in memory
	// above: search only when the portfolio's peak exceeds the lower bound
	// by more than this many parts per million.
	above uint64
}

var budgets = map[Effort]budget{
	Fast:  {portfolio: 1 << 20, nodes: 20_000, maxBuffers: 1024, maxPairs: 1 << 20, above: 10_000},
	Exact: {portfolio: 1 << 27, nodes: 1_000_000, maxBuffers: 1 << 20, maxPairs: 1 << 24},
}

// Result is a placement.
type Result struct {
	// Offsets is indexed like Problem.Buffers.
	Offsets []uint64
	// Peak is the highest end; LowerBound the most bytes live at once.
	Peak, LowerBound uint64
	// Method names what produced the placement, e.g. "best-fit by
	// conflict" or "search by total,width,area".
	Method string
	// Merged counts byte ranges the placers merged; Nodes search nodes.
	Merged, Nodes int64
	// Optimal is true when no placement has a smaller peak: Peak equals
	// LowerBound, or the search explored every placement below Peak.
	Optimal bool
}

// member is one placement of the portfolio: an order and a fit.
type member struct {
	keys []key
	fit  fit
}

func (m member) String() string {
	fits := map[fit]string{bestFit: "best-fit", firstFit: "first-fit"}
	return fits[m.fit] + " by " + keyNames(m.keys)
}

func keyNames(keys []key) string {
	names := map[key]string{bySize: "size", byLength: "width", byArea: "area", byTotal: "total", byStart: "start", byConflict: "conflict"}
	s := make([]string, len(keys))
	for i, k := range keys {
		s[i] = names[k]
	}
	return strings.Join(s, ",")
}

// portfolio is the fixed list of placements Pack tries, best performers on
// real graphs first, so that a budget cut on a large instance keeps them.
var portfolio = []member{
	{[]key{byConflict}, bestFit},
	{[]key{byTotal, byLength, bySize}, bestFit},
	{[]key{byStart, bySize}, bestFit},
	{[]key{bySize, byLength}, bestFit},
	{[]key{byLength, bySize}, bestFit},
	{[]key{byTotal, bySize}, bestFit},
	{[]key{byArea}, bestFit},
	{[]key{byTotal, byLength, bySize}, firstFit},
	{[]key{byArea}, firstFit},
	{[]key{bySize, byLength}, firstFit},
	{[]key{byTotal, bySize}, firstFit},
	{[]key{byConflict}, firstFit},
}

// preorder is one order the search tries: its keys (width, area and total
// as in MiniMalloc's WAT, TAW, TWA) and whether parts split off during the
// search are ordered anew by the bytes their sections still need
// (resorted) or keep the order of the whole.
type preorder struct {
	keys     []key
	resorted bool
}

func (p preorder) String() string {
	if p.resorted {
		return keyNames(p.keys) + " (resorted)"
	}
	return keyNames(p.keys)
}

// preorders are tried in turn with doubling node limits.
var preorders = []preorder{
	{[]key{byLength, byArea, byTotal}, true},
	{[]key{byTotal, byArea, byLength}, true},
	{[]key{byTotal, byLength, byArea}, true},
	{[]key{byLength, byArea, byTotal}, false},
	{[]key{byTotal, byArea, byLength}, false},
	{[]key{byTotal, byLength, byArea}, false},
}

// greedySize is the baseline: largest first, first gap that fits (the
// planner of TensorFlow Lite Micro).
var greedySize = member{[]key{bySize, byLength}, firstFit}

// GreedySize places the buffers largest first, each at the lowest offset
// where it fits: the classic baseline. Capacity is not enforced.
func GreedySize(p *Problem) (*Result, error) {
	in, err := newInstance(p)
	if err != nil {
		return nil, err
	}
	pl := newPlacer(in)
	peak, err := pl.run(in.order(in.features(), greedySize.keys...), greedySize.fit)
	if err != nil {
		return nil, err
	}
	return &Result{Offsets: pl.offsets, Peak: peak, LowerBound: in.lb, Method: greedySize.String(), Merged: pl.merged, Optimal: peak == in.lb}, nil
}

// Pack places every buffer so that no two that are live at once, or that
// conflict, share a byte, aiming at the lowest peak. It is deterministic:
// the same problem and options give the same offsets on every machine.
// When the best peak found exceeds a non-zero Capacity it returns
// ErrCapacity (wrapped, with the peak).
func Pack(p *Problem, o Options) (*Result, error) {
	if o.Effort == "" {
		o.Effort = Fast
	}
	b, ok := budgets[o.Effort]
	if !ok {
		return nil, fmt.Errorf("%w: unknown effort %q (efforts: fast, exact)", ErrInvalid, o.Effort)
	}
	if o.Nodes > 0 {
		b.nodes = o.Nodes
	}
	in, err := newInstance(p)
	if err != nil {
		return nil, err
	}
	res := &Result{LowerBound: in.lb}
	if len(in.bufs) == 0 {
		res.Optimal = true
		return res, nil
	}
	f := in.features()
	pl := newPlacer(in)
	for k, m := range portfolio {
		if k > 0 && (pl.merged >= b.portfolio || res.Peak <= in.goal) {
			break
		}
		peak, err := pl.run(in.order(f, m.keys...), m.fit)
		if err != nil {
			return nil, err
		}
		if res.Offsets == nil || peak < res.Peak {
			res.Offsets = append(res.Offsets[:0], pl.offsets...)
			res.Peak, res.Method = peak, m.String()
		}
	}
	res.Merged = pl.merged
	res.Optimal = res.Peak <= in.goal
	target := res.Peak
	if p.Capacity > 0 && p.Capacity < target {
		target = p.Capacity + 1 // the search must get within the capacity
	}
	far := target > in.goal && target-in.goal > in.lb/1_000_000*b.above
	if far && len(in.bufs) <= b.maxBuffers {
		if adj, ok := in.adjacency(b.maxPairs); ok {
			improve(in, adj, f, b.nodes, target, res)
		}
	}
	if p.Capacity > 0 && res.Peak > p.Capacity {
		return res, fmt.Errorf("%w: the best placement found peaks at %d bytes, capacity %d", ErrCapacity, res.Peak, p.Capacity)
	}
	return res, nil
}

// improve searches for placements below target (a peak already reached,
// or one more than a capacity to meet), first at the lower bound, then by
// bisection, within nodes search nodes; it updates res with every
// improvement.
func improve(in *instance, adj [][]int32, f *features, nodes int64, target uint64, res *Result) {
	s := newSearcher(in, adj)
	left := nodes
	// attempt decides capacity c with up to spend nodes: round robin over
	// the preorders with doubling node limits, as MiniMalloc does.
	attempt := func(c uint64, spend int64) (found, complete bool) {
		limit := int64(len(in.bufs))
		for spend > 0 {
			limit *= 2
			for _, po := range preorders {
				l := min(limit, spend)
				found, complete := s.solve(c, f, po, l)
				spend -= s.nodes
				left -= s.nodes
				res.Nodes += s.nodes
				if found {
					peak := uint64(0)
					for i, off := range s.offsets {
						peak = max(peak, off+in.bufs[i].Size)
					}
					res.Offsets = append(res.Offsets[:0], s.offsets...)
					res.Peak, res.Method = peak, "search by "+po.String()
					return true, false
				}
				if complete {
					return false, true
				}
				if spend <= 0 {
					return false, false
				}
			}
		}
		return false, false
	}
	// Every capacity below proven is infeasible: the goal is a lower
	// bound, and a complete search at c rules out c and everything less.
	// Once the peak found is proven, it is optimal.
	proven := in.goal
	settle := func() { res.Optimal = res.Optimal || res.Peak <= proven }
	lo, hi := in.goal, target-1
	if found, complete := attempt(lo, left/2); found {
		res.Optimal = true
		return
	} else if complete {
		proven = lo + 1
		settle()
	}
	lo++
	for lo <= hi && left > 0 {
		mid := lo + (hi-lo)/2
		found, complete := attempt(mid, left/2+1)
		switch {
		case found:
			hi = res.Peak - 1
		case complete:
			lo = mid + 1
			proven = max(proven, mid+1)
		default:
			lo = mid + 1
		}
		settle()
	}
}
