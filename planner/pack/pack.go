package pack

import (
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
)

// Effort chooses how hard Pack works. Work is counted in deterministic
// units (byte ranges merged by the placer, nodes of the search), never in
// time, so every machine returns the same offsets.
type Effort string

const (
	// Fast runs a portfolio of best-fit placements under several orders
	// within a work budget and, where the peak is still above the lower
	// bound, a short search (on instances of more than 1,024 buffers,
	// only where it is 0.5 to 5 % above). It is the default.
	Fast Effort = "fast"
	// Exact runs Fast and, unless that reached the lower bound, the
	// portfolio, blocks and a search over canonical placements (see
	// searcher) with a large node budget: first at the lower bound, then
	// by bisection between it and the best peak found; it keeps the
	// lower result (see Pack).
	Exact Effort = "exact"
)

// Efforts lists the effort levels.
var Efforts = []Effort{Fast, Exact}

// Options tune Pack.
type Options struct {
	Effort Effort
	// Nodes overrides the canonical search's node budget when positive.
	Nodes int64
	// Budget overrides the effort's work budget when positive (see
	// Result.Work): it bounds everything Pack does after the two greedy
	// placements every result starts from (at the exact effort, those of
	// the fast run it starts with too).
	Budget int64
	// Spawn, when set, runs the function it is given on a goroutine of
	// the caller's; the package starts none itself. Pack then runs two of
	// its independent steps at a time (blocks' orders, the trials it
	// refines, skyline restarts), folding their results in a fixed
	// order: the placement, the work and the nodes are the same with it
	// as without it, on any number of cores; only the time differs.
	Spawn func(func())
	// halt, on blocks' problems, says their result will be thrown away
	// (see halt).
	halt *halt
}

// diveWork times the square of the buffers is what the fast effort must
// have left to start the canonical search on the caller's problem above
// budget.blockBuffers: a dive of the search (each buffer placed at the
// first try) cost 2.5 to 2.7 times that square on transformer training
// steps of 1,363 to 3,951 buffers, and the search's first attempt gets
// half of what it is given. Where one dive does not fit, the search would
// spend the rest of the budget and find nothing (a synthetic graph of
// 10,000 tensors: 0.30 s became 0.88 s at the same peak).
const diveWork = 6

// secondPass is the most buffers on which the portfolio members its
// budget cut run once the other steps are done: a member's byte ranges
// take longer to merge where many buffers overlap, and on iopddl-S_1
// (28,526 buffers, 43 million overlapping pairs) the one that would run
// next takes 0.12 s for 0.02 % (the planning time there is held to
// 0.3 s), where on mixed training steps of 20,000 buffers all of them
// take 0.04 to 0.08 s.
const secondPass = 20_000

// mergeCost weighs a byte range merged by a placer against the searches'
// unit of work (a section or a candidate looked at): about the ratio of
// their times.
const mergeCost = 8

// budget is what an effort may spend on an instance of n buffers.
type budget struct {
	work      int64 // total work after the mandatory members
	portfolio int64 // byte ranges the optional members may merge before the other steps
	sky       int64 // work of the skyline restarts
	nodes     int64 // canonical search nodes
	// The canonical search runs where the best peak is above the goal:
	// on instances of at most blockBuffers buffers whose overlapping
	// pairs fit in blockPairs (blocks' problems, and the caller's); on
	// the caller's problem also when it is larger, where maxPairs is not
	// 0 and its pairs fit in it, the peak exceeds the goal by more than
	// searchAbove parts per million and by at most searchBelow or a
	// capacity is to be met, and what is left pays for a dive (diveWork).
	blockBuffers, blockPairs, maxPairs int
	searchAbove, searchBelow           uint64
	// Blocks and the skyline restarts run when the best peak exceeds the
	// goal by more than this many parts per million.
	above uint64
	// On the caller's problem of at most againBuffers buffers, where the
	// caller did not set the budget, blocks run again with again times
	// the work added where the best peak after them still exceeds the
	// goal by more than againAbove parts per million.
	again        int64
	againBuffers int
	againAbove   uint64
	// On the caller's problem of at most relaxBuffers buffers, the
	// overlap search (relax) gets up to relax work where the best peak
	// after blocks still exceeds the goal by more than relaxAbove parts
	// per million: what it spends added to the budget where the caller
	// did not set it, else out of what is left. It runs where the pairs
	// fit in relaxPairs and in an eighth of its work.
	relax        int64
	relaxBuffers int
	relaxPairs   int
	relaxAbove   uint64
}

// budgetOf scales the effort's budget with the instance: every part grows
// with the buffers (n) and the positions they span, so large instances
// are not cut hardest. The numbers are work units, never time: every
// machine spends the same.
func budgetOf(e Effort, n int, positions int32) budget {
	size := int64(n) + int64(positions)
	switch e {
	case Exact:
		return budget{work: DefaultExactBudget, portfolio: 1 << 40, sky: DefaultExactBudget / 16, nodes: 1 << 40,
			blockBuffers: 1 << 20, blockPairs: 1 << 24,
			relax: DefaultExactBudget / 4, relaxBuffers: 1 << 16, relaxPairs: 1 << 20, relaxAbove: 10_000}
	default:
		return budget{work: 1<<27 + 512*size, portfolio: 1<<20 + 32*size, sky: 1<<23 + 1024*size, nodes: 20_000,
			blockBuffers: 1024, blockPairs: 1 << 20, maxPairs: 1 << 22, searchAbove: 5_000, searchBelow: 50_000, above: 10_000,
			again: 3, againBuffers: 8192, againAbove: 50_000,
			relax: 1<<28 + 1024*size, relaxBuffers: 8192, relaxPairs: 1 << 20, relaxAbove: 50_000}
	}
}

// DefaultExactBudget is the exact effort's work budget: 5 to 31 s on one
// core of the 2-core development VM for the instances that spend it all,
// whatever their size (the time a unit takes varies with what is not
// counted, such as sorting and the search's floor scans); up to 16 s
// with Options.Spawn on both.
const DefaultExactBudget = 1 << 32

// Result is a placement.
type Result struct {
	// Offsets is indexed like Problem.Buffers.
	Offsets []uint64
	// Peak is the highest end. LowerBound is the best lower bound known
	// on any placement's peak: the most bytes live at once, raised where
	// alignment padding must add to it (see instance.goal) and to one
	// more than every capacity a complete search found no placement
	// within. It equals Peak exactly when Optimal.
	Peak, LowerBound uint64
	// Method names what produced the placement, e.g. "best-fit by
	// conflict", "skyline dive", "relax" or "search by total,width,area".
	Method string
	// Merged counts byte ranges the placers merged; Nodes canonical
	// search nodes.
	Merged, Nodes int64
	// Work is what was spent after the two mandatory greedy placements,
	// in the searches' units (a section or a candidate looked at; a byte
	// range merged by a placer counts mergeCost); Budget is what was
	// allowed. Work passes Budget by at most one search node's worth.
	Work, Budget int64
	// Optimal is true when no placement has a smaller peak: Peak equals
	// LowerBound, or the search explored every placement below Peak.
	Optimal bool
}

// Gap is how far the peak may be above the optimum, as a fraction of
// LowerBound: 0 when the placement is proven optimal.
func (r *Result) Gap() float64 {
	if r.Optimal || r.LowerBound == 0 {
		return 0
	}
	return float64(r.Peak)/float64(r.LowerBound) - 1
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
	greedySize, // always run: packed is never worse than the baseline
	{[]key{byTotal, byLength, bySize}, bestFit},
	{[]key{byStart, bySize}, bestFit},
	{[]key{bySize, byLength}, bestFit},
	{[]key{byLength, bySize}, bestFit},
	{[]key{byTotal, bySize}, bestFit},
	{[]key{byArea}, bestFit},
	{[]key{byTotal, byLength, bySize}, firstFit},
	{[]key{byArea}, firstFit},
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

// mandatory is how many members of portfolio run whatever the budget on
// the caller's problem (unless the first reaches the goal: nothing places
// lower); on blocks' problems they run within it (see pack).
const mandatory = 2

// GreedySize places the buffers largest first, each at the lowest offset
// where it fits: the classic baseline. Capacity is not enforced.
func GreedySize(p *Problem) (*Result, error) {
	in, err := newInstance(p)
	if err != nil {
		return nil, err
	}
	pl := newPlacer(in)
	peak, _, err := pl.run(in.order(in.features(), greedySize.keys...), greedySize.fit, 0, 0)
	if err != nil {
		return nil, err
	}
	return &Result{Offsets: pl.offsets, Peak: peak, LowerBound: in.goal, Method: greedySize.String(), Merged: pl.merged, Optimal: peak <= in.goal}, nil
}

// Pack places every buffer so that no two that are live at once, or that
// conflict, share a byte, aiming at the lowest peak. It is deterministic:
// the same problem and options give the same offsets on every machine.
// When the best peak found exceeds a non-zero Capacity it returns
// ErrCapacity (wrapped, with the peak).
//
// Its steps, each kept only when it lowers the peak: the portfolio's
// mandatory members (best fit by conflict pressure, and GreedySize, so
// the result is never worse than the baseline), the other members within
// the portfolio budget, a skyline dive, blocks (buffers merged into
// rectangles, packed by the same steps), where the peak is still far
// above the bound the overlap search ("relax"), skyline search restarts
// at the goal, the canonical search bisecting below the best peak, and then, on
// a fast run of its own of up to 20,000 buffers, the members the
// portfolio budget cut, while work is left; all but the mandatory members
// within the work budget.
//
// The exact effort first runs the fast one (within at most half of its
// budget), returns it if it reached the lower bound, and otherwise keeps
// the lower of it and the exact steps run with the rest: with the
// default budget, exact is never worse than fast.
func Pack(p *Problem, o Options) (*Result, error) {
	if o.Effort != Exact {
		return pack(p, o, 0, whole)
	}
	total := o.Budget
	if total <= 0 {
		total = DefaultExactBudget
	}
	fast, err := pack(p, Options{Effort: Fast, Nodes: o.Nodes, Spawn: o.Spawn}, total/2, whole)
	if err != nil && !errors.Is(err, ErrCapacity) {
		return nil, err
	}
	fast.Budget = total
	if fast.Optimal {
		return fast, err
	}
	o.Budget = total - fast.Work
	res, err := pack(p, o, 0, whole)
	if err != nil && !errors.Is(err, ErrCapacity) {
		return nil, err
	}
	if fast.Peak < res.Peak {
		res.Offsets, res.Peak, res.Method = fast.Offsets, fast.Peak, fast.Method
	}
	res.LowerBound = max(res.LowerBound, fast.LowerBound)
	res.Optimal = res.Optimal || res.Peak <= res.LowerBound
	err = capacityErr(p, res)
	res.Work += fast.Work
	res.Merged += fast.Merged
	res.Nodes += fast.Nodes
	res.Budget = total
	return res, err
}

// scope is the problem a pack runs on.
type scope uint8

const (
	// whole is the caller's problem: every step runs.
	whole scope = iota
	// nested is blocks' problem that blocks may merge again, as refine
	// packs it once the stacks are taken apart: the skyline restarts are
	// left out, and the search runs however close to the goal the best
	// peak is.
	nested
	// inner is blocks' problem packed as it is: blocks are left out too.
	inner
)

// pack is Pack at one effort on the problem of scope sc. A positive limit
// caps the work budget.
func pack(p *Problem, o Options, limit int64, sc scope) (*Result, error) {
	if o.Effort == "" {
		o.Effort = Fast
	}
	if !slices.Contains(Efforts, o.Effort) {
		return nil, fmt.Errorf("%w: unknown effort %q (efforts: fast, exact)", ErrInvalid, o.Effort)
	}
	in, err := newInstance(p)
	if err != nil {
		return nil, err
	}
	b := budgetOf(o.Effort, len(in.bufs), in.positions)
	if o.Budget > 0 {
		b.work, b.sky = o.Budget, o.Budget/16
		b.nodes = 1 << 40 // the work bounds the search
	}
	if o.Nodes > 0 {
		b.nodes = o.Nodes
	}
	if limit > 0 {
		b.work, b.sky = min(b.work, limit), min(b.sky, limit)
	}
	// On blocks' problems the search runs however close to the goal the
	// best peak is, and the mandatory members are work like the rest,
	// within the budget: no guarantee is owed there, and what they will
	// cost is known only once they ran.
	capped := sc != whole
	// Pack's exact effort starts with a fast run on the caller's problem
	// under a limit (half its budget); only blocks' problems, never
	// whole, are also packed under one.
	startsExact := sc == whole && limit > 0
	if capped {
		b.above = 0
	}
	res := &Result{LowerBound: in.goal, Budget: b.work}
	if len(in.bufs) == 0 {
		res.Optimal = true
		return res, nil
	}
	f := in.features()
	pl := newPlacer(in)
	var spent int64 // work after the mandatory members (on blocks' problems, with them)
	left := func() int64 { return b.work - spent }
	// upToLimit is work x added to the budget, cut to what the limit
	// leaves (the exact effort's fast run stays within its half).
	upToLimit := func(x int64) int64 {
		if limit > 0 {
			return min(x, limit-b.work)
		}
		return x
	}
	// members runs the portfolio from member k on, while its members fit
	// (within the portfolio budget, inPortfolio) and none has reached the
	// goal; it returns the first member it did not run (len(portfolio)
	// once the goal is reached or the run halted: none is left to run).
	members := func(k int, inPortfolio bool) (int, error) {
		for ; k < len(portfolio); k++ {
			m := portfolio[k]
			// Once a member reaches the goal no placement is lower, so
			// the rest are skipped, greedy-size too: it cannot win.
			if res.Offsets != nil && res.Peak <= in.goal || o.halt.done() {
				return len(portfolio), nil
			}
			// An optional member runs in the portfolio when it is
			// expected to fit (a member costs about what the mandatory
			// ones cost each), and after the other steps while work is
			// left, even where it is not expected to finish: nothing else
			// would spend that work.
			if k >= mandatory && (inPortfolio && (pl.merged >= b.portfolio || mergeCost*pl.merged/mandatory > left()) || left() <= 0) {
				break
			}
			before := pl.merged
			// A member is abandoned as soon as its peak reaches the best
			// so far: it can no longer win, and its final peak would be
			// no lower, so the best stays no worse than every member. An
			// optional one is also abandoned once it has spent what is
			// left.
			counted := k >= mandatory || capped
			var most int64
			if counted {
				most = before + left()/mergeCost + 1
			}
			peak, complete, err := pl.run(in.order(f, m.keys...), m.fit, res.Peak, most)
			if err != nil {
				return k, err
			}
			if counted {
				spent += mergeCost * (pl.merged - before)
			}
			if complete && (res.Offsets == nil || peak < res.Peak) {
				res.Offsets = append(res.Offsets[:0], pl.offsets...)
				res.Peak, res.Method = peak, m.String()
			}
		}
		return k, nil
	}
	next, err := members(0, true)
	if err != nil {
		return nil, err
	}
	res.Merged = pl.merged
	if res.Offsets == nil || o.halt.done() { // a blocks' problem whose members did not fit, or whose result is thrown away
		res.Work = spent
		return res, nil
	}
	var sky *skySearch
	if in.partners == nil && res.Peak > in.goal {
		sky = dive(in, b, res, &spent)
	}
	if sc != inner && in.partners == nil && in.far(res.Peak, b.above) && left() > 0 {
		spent += blocks(in, o, left()*3/4, res, sc)
		// Still more than 5 % above the goal on the caller's problem
		// (tilings whose cuts the orders did not find): blocks run again
		// with three times the budget added (more orders, each with more
		// work), and the lower of the two stays. Tried once per instance
		// and only where the caller left the budget to the effort; up to
		// 8,192 buffers, so that 20,000 plan within a second (sliced
		// 20,000 ended +17.70 and +11.65 % in 0.68 s; with four times the
		// budget from the start, +15.19 and +14.25 % in 2 s). Held out,
		// fast, through the planner: dense and sliced 5,000 seeds 100 to
		// 115, 7 of 32 above +5 % became 3 (dense 4 to 0), a mean of
		// +2.25 % became +1.24 %; holed 5,000 seeds 200 to 231, 3 became
		// 2; coarse 1,000 and 3,000 seeds 100 to 107, 14 of 16 became 12;
		// perfect, pinwheel, banded, halving, mixed and transformer
		// instances the same (they end within 5 % the first time); none
		// ended higher. It costs
		// about 3.6 times the planning time where it runs (coarse 2,000
		// seed 0: 0.60 s became 2.21 s, at the same peak) and nothing
		// where the first blocks were within 5 %. Giving four times the
		// budget from the start instead slowed every tiling (dense 5,000
		// seed 0, at the bound either way: 0.25 s became 0.51 s) and
		// ended higher on some.
		if sc == whole && o.Budget <= 0 && b.again > 0 && len(in.bufs) <= b.againBuffers && in.far(res.Peak, b.againAbove) {
			b.work += upToLimit(b.again * b.work)
			res.Budget = b.work
			spent += blocks(in, o, left()*3/4, res, sc)
		}
	}
	// Still far above the goal on the caller's problem: the overlap
	// search starts from the best placement (relax). On tilings it
	// lowers what blocks left (fast, through the planner: the suite's
	// coarse 2,000 seeds 0 and 1, +14.72 and +16.24 %, became +8.47 and
	// +7.74 %; held out, coarse 3,000 seeds 100 to 107, +15.77 to
	// +18.40 %, +8.51 to +10.60 %; dense 5,000 seeds 10 and 23, +6.63
	// and +5.24 %, +4.63 and +3.74 %; sliced 5,000 seeds 14, 21, 25, 26
	// and 31, +7.05 to +11.40 %, +3.55 to +9.90 %), for about a second
	// more at 2,000 to 5,000 buffers.
	// Where the caller did not set the budget, what it spends is added
	// to it (so the later steps get no more than they had).
	if sc == whole && b.relax > 0 && len(in.bufs) <= b.relaxBuffers && in.far(res.Peak, b.relaxAbove) {
		share, adds := min(b.relax, left()/2), o.Budget <= 0
		if adds {
			share = upToLimit(b.relax)
		}
		if share > 0 {
			w := relax(in, b.relaxPairs, share, res)
			spent += w
			if adds {
				b.work += w
				res.Budget = b.work
			}
		}
	}
	// Blocks' problem skips the restarts: on the blocks of perfect
	// packings they took most of each packing's work, which the search
	// puts to better use (5,000 buffers, seeds 40 to 79, fast: a mean of
	// +1.76 % over the lower bound with them, +1.25 % without).
	if sky != nil && res.Peak > in.goal && sc == whole {
		restarts(in, sky, b, res, &spent, o.Spawn)
	}
	res.Optimal = res.Peak <= in.goal
	target := res.Peak
	if p.Capacity > 0 && p.Capacity < target {
		target = p.Capacity + 1 // the search must get within the capacity
	}
	// The search's setup (the adjacency, a unit per buffer) is paid
	// from its share.
	maxPairs, runs := b.blockPairs, len(in.bufs) <= b.blockBuffers
	if !runs && sc == whole && b.maxPairs > 0 {
		n := int64(len(in.bufs))
		within := in.far(res.Peak, b.searchAbove) && !in.far(res.Peak, b.searchBelow)
		pays := left() >= diveWork*n*n
		maxPairs, runs = b.maxPairs, (within || target < res.Peak) && pays
	}
	if target > in.goal && runs && left() > int64(len(in.bufs)) {
		if adj, ok := in.adjacency(maxPairs); ok {
			spent += int64(len(in.bufs))
			spent += improve(in, adj, f, b.nodes, left(), target, res)
		}
	}
	// What the later steps left pays for the members the portfolio
	// budget cut, on the caller's problem of up to secondPass buffers:
	// where neither blocks nor the search ran (blocks: a peak within 1 %
	// of the goal; the search: too many pairs, a peak within 0.5 %, or a
	// dive it cannot pay for), most of the budget is left, and a member
	// may reach the goal (mixed 5,000 seed 2: first fit by total, width
	// and size, the ninth member, at it; the first eight end +0.65 % to
	// +5.17 % above). Not on the fast run the exact effort starts with
	// (startsExact): its own portfolio runs every member, and the work is
	// its steps' (mixed 2,000 seed 3 under a budget of 2^25 ended
	// +0.192 % where it ends +0.113 %), nor once a search proved the peak
	// optimal.
	if sc == whole && !startsExact && res.Peak > in.goal && !res.Optimal && next < len(portfolio) && len(in.bufs) <= secondPass && left() > 0 {
		if _, err := members(next, false); err != nil {
			return nil, err
		}
		res.Merged = pl.merged
		res.Optimal = res.Peak <= in.goal
	}
	res.Work = spent
	return res, capacityErr(p, res)
}

// capacityErr is ErrCapacity when res peaks above p's non-zero Capacity;
// it says so when no placement can fit.
func capacityErr(p *Problem, res *Result) error {
	switch {
	case p.Capacity == 0 || res.Peak <= p.Capacity:
		return nil
	case res.LowerBound > p.Capacity:
		return fmt.Errorf("%w: no placement fits: every placement peaks at %d bytes or more (proven; the best found peaks at %d), capacity %d", ErrCapacity, res.LowerBound, res.Peak, p.Capacity)
	}
	return fmt.Errorf("%w: the best placement found peaks at %d bytes, capacity %d", ErrCapacity, res.Peak, p.Capacity)
}

// far reports whether peak is above the goal by more than ppm parts per
// million of the lower bound: (peak-goal)·10^6 > lb·ppm, compared in 128
// bits (the bound divided by 10^6 first was 0 for an arena under a
// million bytes, which was then far at any peak above the goal).
func (in *instance) far(peak, ppm uint64) bool {
	if peak <= in.goal {
		return false
	}
	h1, l1 := bits.Mul64(peak-in.goal, 1_000_000)
	h2, l2 := bits.Mul64(in.lb, ppm)
	return h1 > h2 || h1 == h2 && l1 > l2
}

// peakOf returns the highest end of a placement.
func (in *instance) peakOf(offsets []uint64) uint64 {
	var peak uint64
	for i, off := range offsets {
		peak = max(peak, off+in.bufs[i].Size)
	}
	return peak
}

// dive runs the skyline dive when its cost fits the budget; it returns
// the skyline placer for the restarts.
func dive(in *instance, b budget, res *Result, spent *int64) *skySearch {
	s := newSkySearch(in)
	// A dive covers every buffer once and most of them again on trial;
	// it is abandoned if it overruns the budget anyway.
	if 4*in.width+int64(in.positions) <= b.work-*spent && s.dive(in.goal, b.work-*spent) {
		s.keep(res, "skyline dive")
	}
	*spent += s.work
	return s
}

// keep makes the placer's placement the result's when it peaks lower.
func (s *skySearch) keep(res *Result, method string) {
	if peak := s.in.peakOf(s.offsets); peak < res.Peak {
		res.Offsets = append(res.Offsets[:0], s.offsets...)
		res.Peak, res.Method = peak, method
	}
}

// restarts runs skyline search restarts at the goal on instances still
// far from it, ties shuffled by a fixed seed each, with a share of the
// budget that grows as restarts fail. They run two at a time (at once
// with spawn), the second on a placer of its own with the limit left
// once the first has spent its own and the largest overrun seen so far;
// the second is thrown away when the first reaches the goal. The limits
// do not depend on spawn, so every machine spends the same.
func restarts(in *instance, s *skySearch, b budget, res *Result, spent *int64, spawn func(func())) {
	r := min(b.sky, b.work-*spent)
	if !in.far(res.Peak, b.above) || r <= 0 {
		return
	}
	var used, over int64
	per := max(r/64, 64*int64(len(in.bufs)))
	var s2 *skySearch
	for k := uint64(0); used < r && res.Peak > in.goal; k += 2 {
		// A restart may pass its limit by a node; the next ones leave
		// room for the largest such overrun seen.
		lim := [2]int64{min(per, r-used-over)}
		per += per / 4
		lim[1] = min(per, r-used-lim[0]-2*over)
		per += per / 4
		if lim[0] <= 0 {
			break
		}
		searches := []*skySearch{s}
		if lim[1] > 0 {
			if s2 == nil {
				s2 = newSkySearch(in)
			}
			searches = append(searches, s2)
		}
		var works [2]int64
		tasks := make([]func(*halt) bool, len(searches))
		for j, x := range searches {
			tasks[j] = func(h *halt) bool {
				x.rng = rand.New(rand.NewPCG(k+uint64(j), uint64(len(in.bufs))))
				x.halt = h
				w := x.work
				found := x.solve(in.goal, lim[j])
				works[j] = x.work - w
				return found
			}
		}
		first := firstOf(spawn, nil, tasks)
		for j := range searches[:min(first+1, len(searches))] {
			used += works[j]
			over = max(over, works[j]-lim[j])
		}
		if first < len(searches) {
			searches[first].keep(res, "skyline search")
			res.Optimal = true
		}
	}
	*spent += used
}

// improve searches for placements below target (a peak already reached,
// or one more than a capacity to meet), first at the lower bound, then by
// bisection, within nodes search nodes; it updates res with every
// improvement.
func improve(in *instance, adj [][]int32, f *features, nodes, work int64, target uint64, res *Result) int64 {
	s := newSearcher(in, adj)
	left := nodes
	// attempt decides capacity c with up to spend nodes and share work:
	// round robin over the preorders with doubling node limits, as
	// MiniMalloc does.
	attempt := func(c uint64, spend, share int64) (found, complete bool) {
		s.maxWork = min(s.work+share, work)
		limit := int64(len(in.bufs))
		for spend > 0 && s.affords() {
			limit *= 2
			for _, po := range preorders {
				l := min(limit, spend)
				found, complete := s.solve(c, f, po, l)
				spend -= s.nodes
				left -= s.nodes
				res.Nodes += s.nodes
				if found {
					res.Offsets = append(res.Offsets[:0], s.offsets...)
					res.Peak, res.Method = in.peakOf(s.offsets), "search by "+po.String()
					return true, false
				}
				if complete {
					return false, true
				}
				if spend <= 0 || !s.affords() {
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
	// What the complete searches proved is a lower bound on every
	// placement, kept even when no placement meets it.
	defer func() { res.LowerBound = max(res.LowerBound, proven) }()
	lo, hi := in.goal, target-1
	if found, complete := attempt(lo, left/2, (work-s.work)/2); found {
		res.Optimal = true
		return s.work
	} else if complete {
		proven = lo + 1
		settle()
	}
	lo++
	for lo <= hi && left > 0 && s.work < work {
		mid := lo + (hi-lo)/2
		found, complete := attempt(mid, left/2+1, (work-s.work)/2+1)
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
	return s.work
}
