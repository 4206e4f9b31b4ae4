// Package pack places buffers with known lifetimes at byte offsets so that
// no two buffers live at the same time share a byte, aiming at the lowest
// peak: offline dynamic storage allocation. It is the engine of the
// planner's packed strategy, and it is pure: values in, values out, no
// clock, no goroutines of its own, so every machine computes the same
// offsets. A caller may lend it goroutines (Options.Spawn) to run some
// steps at once; their results are folded in a fixed order, so the
// offsets are the same with them, on any number of cores.
//
// # Problem
//
// A Problem lists Buffers, each live over [Start, End) with a Size and an
// Align, plus optional Conflicts (pairs that must never share a byte, for
// must_not_alias) and a Capacity. LowerBound is the most bytes live at one
// instant; no placement peaks lower. Check is the obviously right
// quadratic checker the tests hold every placement to.
//
// Result.LowerBound is the best bound Pack knows, often tighter: padding
// that alignments force on the buffers live at one instant raises it, and
// so does every capacity a complete search found no placement within
// (conflicts can leave the bytes live at once far below what any
// placement needs). It equals the peak exactly when the placement is
// proven optimal, and a Capacity below it is reported as one no placement
// fits.
//
//	p := &pack.Problem{Buffers: []pack.Buffer{
//		{Start: 0, End: 2, Size: 8},
//		{Start: 0, End: 4, Size: 2},
//		{Start: 2, End: 4, Size: 4},
//		{Start: 2, End: 4, Size: 4},
//	}}
//	r, _ := pack.Pack(p, pack.Options{})
//	// r.Peak == r.LowerBound == 10: the 2-byte buffer at 0, the 8-byte one
//	// above it, the two 4-byte ones side by side where it was.
//
// # Portfolio
//
// Pack first runs a portfolio of greedy placements: buffers taken in one
// order (by conflict pressure, by the busiest instant they live at, by
// birth, size, lifetime or area), each put in the smallest gap it fits
// (best fit) or the lowest (first fit) among the buffers already placed
// that it meets. Two members always run: best fit by conflict pressure
// and GreedySize, so packed is never worse than the baseline, on any
// instance and at any effort (GreedySize is skipped only when the first
// reached the lower bound: it cannot do better). Finding those gaps is
// the hot path: a segment tree over time keeps, per node, the merged
// byte ranges of the buffers placed in its subtree and of those covering
// it, so a query merges O(log T) short sets instead of visiting every
// buffer met (28,526 buffers with 43 million overlapping pairs take about
// 0.12 s per placement). The other members run while they fit the
// portfolio budget, and on a fast run (not the one the exact effort
// starts with, whose own portfolio runs them all) those it cut run once
// the other steps are done, while work is left, on instances of up to
// 20,000 buffers: where neither blocks nor the search ran (a peak within
// 1 % of the bound; pairs too many to search, a peak within 0.5 %, or a
// dive the budget cannot pay for) most of it is (held out, mixed
// training steps of 5,000 to 20,000 buffers, seeds 0 to 7: a mean
// +0.262 % became +0.175 %, with 3 of 24 above +0.5 % where 4 were;
// mixed 5,000 seed 2 went from +0.65 % to the bound).
//
// # Blocks
//
// After the skyline dive (see Skyline), on instances without Conflicts
// still more than 1 % above the lower bound (at the exact effort, any
// above it), buffers are merged into blocks, rectangles whose inside is
// fixed, as the cuts of a guillotine tiling are found again bottom up:
// blocks live over exactly the same sections are stacked (of up to eight,
// the fewest, two or more, that sum to the size of a block they meet in
// time, when not all of them do; of more, all but one when those do),
// and a block whose end meets the start of the only block of its size
// starting there (and that block's only candidate) is chained with it,
// sharing its bytes, as is one whose chain with a block of its size
// meeting it would live over the same sections as another block, however
// many candidates there are (so that it can stack at once: where sizes
// repeat, that is what tells the pairs apart). Five blocks that tile a
// box as a pinwheel (a middle block and four around it, each reaching
// one side of the box: a tiling no cut in time or in bytes splits) are
// merged too, found by where they start and end and by their sizes
// alone, before any guess: the first order looks around blocks no other
// block lives over, and the others look only when it made one per
// hundred buffers at least, and then before stacking any block. Where the
// bytes live fall short of the lower bound, half the orders also take as
// buffers of their own the holes that shortfall traces (pieces missing
// from a tiling): rectangles it steps up into and down out of by the same
// size, and pairs of them one ending where the other starts, when they
// explain a quarter of the shortfall at least, and then holes peeled off
// what is left where pieces start or end together (in two readings, a
// quarter of the orders each), overlapping ones cut again where the
// buffers around them say other rectangles with the same shortfall are
// the missing pieces; so the cuts around them are found again
// (holes, and blocks of holes alone, that no merge took into a block with
// a buffer are not packed). The blocks left are packed as buffers of
// their own by the same steps, and, while the peak stays above the goal,
// the blocks placed above it are taken apart one level and the rest
// packed again. Blocks of different parts can live over the same
// sections, or meet in time at the same size, by coincidence, and a merge
// of them hides the tiling; which merges go astray depends on the order
// the blocker meets the blocks in, so it merges in several orders (the
// buffers' own, then deterministic shuffles; one per 640 units of its work
// per buffer, 4 to 64: about 30 at the fast effort on 5,000 buffers, 7 on
// 20,000, 64 at the exact one; fewer, down to 4, where the first order's
// blocker could not finish within an order's share, so that each order's
// blocker can finish and leave work to pack its blocks), every
// other one making at first only the chains whose result can stack at
// once (a coincidental chain is the merge that most often hides a
// tiling, but holding chains back lets stacks take blocks from theirs;
// such an order spends more, and where the second order's blocker spent
// three quarters of a share, each of them may spend half as much again
// as it did);
// where a quarter or more of the first order's stacks were of three
// blocks or more whose sizes no neighbour confirms (tilings with many
// pieces to a tick, where blocks of unrelated parts live over the same
// sections by chance), six wary orders follow that refuse such stacks,
// with an eighth of the work among them (on the caller's problem only,
// and where each one's share is eight times what the first order spent
// at least: a wary blocker spends eight to nine times as much). It packs each result once cheaply (the blocks' packings run the
// portfolio, the dive and the canonical search, not the skyline
// restarts), and refines the ones that packed lowest, two at a time
// (with Options.Spawn the orders after the first run ahead on another
// core and the two refine at once, with the same results). Most of the merges that go astray are stacks, so
// after the first packing every stack is taken apart too, and blocks merge
// what is left again (once, one level down) before it is packed: the block
// a stack took by chance goes back to its own part. So is every chain that
// meets where a chain chosen among several candidates of its size (a guess)
// met, at that size: blocks may pair them anew. Each of refine's rounds, at
// most 9, may spend an even share of what is left to the rounds that can
// still come, so the later ones, where the tiling is found, are not starved
// by the first (at the exact effort a packing spends whatever it is given).
// This recovers the structure of tight instances that placements buffer by
// buffer miss: perfect packings of 1,000 to 10,000 buffers at or near the
// lower bound (at the fast effort, all 120 seeds of 5,000 buffers tried at
// it; at the exact effort, all 15 seeds of 10,000 tried), where the skyline
// alone ended 20 to 30 % above it, and MiniMalloc's A, D and E at the lower
// bound at the fast effort.
//
// # Skyline
//
// Then, on instances without Conflicts, a skyline placer fills the lowest
// point of the skyline with a buffer that starts there and fits the
// valley, as strip packers do (see skySearch): a dive without
// backtracking when its cost fits the budget, and, on instances still
// more than 1 % above the lower bound, depth-first restarts that aim at
// the goal itself and cut a branch as soon as some valley can be neither
// covered nor raised. It finds exact fits that order-driven placers miss
// (iopddl-S_1 at the lower bound, perfect packings of up to a few hundred
// buffers).
//
// # Overlap search
//
// Where the caller's problem is still more than 5 % above the lower bound
// after blocks (at the exact effort, 1 %; with Conflicts, where blocks do
// not run, after the dive), on up to 8,192 buffers (2^16 at the exact
// effort) whose overlapping pairs fit in 2^20 and in an eighth of its
// work, a local search over
// overlaps lowers the peak (see relaxer; the approach of strip packers
// that minimise overlap, such as Egeblad and Pisinger's guided local
// search, here in one dimension, since lifetimes are fixed): from the best
// placement, it asks for a capacity a hundredth of the bound below its
// peak, moves every buffer above it down inside it, and lets buffers
// overlap; one at a time, a buffer that overlaps moves to the offset in
// [0, capacity) where its overlap with the buffers it must not share
// bytes with, weighted per pair, is least (an exact sweep over their
// edges: each buffer keeps its neighbours in order of their bottoms and
// of their tops, mended by insertion as they move, so a sweep merges
// four ordered streams instead of sorting its corners), and where none
// can lower its own every pair that still overlaps weighs one more. Once
// nothing overlaps it asks for a hundredth less again; a capacity it
// does not reach within a third of its work is asked again at half the
// step. Conflicts are pairs like the others, and
// offsets move in units of the largest alignment (it runs where every
// size is a multiple of it). At the fast effort, the suite's coarse 2,000
// seeds 0 and 1, +14.72 and +16.24 % above the bound, became +8.47 and
// +7.74 %; held out, holed 5,000 seeds 24 and 105, +11.40 and +14.13 %,
// became +5.40 and +6.13 %.
//
// # Search
//
// When the best peak is still above the lower bound on an instance whose
// overlapping pairs fit in memory (see Budgets), a depth-first search
// over canonical placements takes over (the approach of Moffitt's
// MiniMalloc, ASPLOS 2023, implemented anew): buffers go down in
// nondecreasing offset order, each at the lowest offset its placed
// neighbours leave; candidates are ordered by that offset and a preorder
// (width, area, total: MiniMalloc's WAT, TAW, TWA, each also with
// split-off parts ordered anew by the bytes they still need, tried in
// turn with doubling node limits); dominated placements, identical twins
// out of preorder and placements that leave some section unable to hold
// its remaining bytes are cut; a section boundary no unplaced buffer
// crosses splits the rest into independent parts. It first asks for the
// lower bound, then bisects between it and the best peak found. A
// complete search at a capacity proves that no placement fits within it
// (Result.LowerBound is raised past it), and, just below a peak, proves
// the peak optimal (Result.Optimal).
//
// # Budgets
//
// Work is counted in deterministic units (a section or a candidate looked
// at; a byte range merged by a placer counts 8), never in time, so every
// machine returns the same offsets. Everything after the two mandatory
// members runs within a work budget (Result.Work, Result.Budget) that
// grows with the instance: Fast (the default) allows 2^27 units plus 512
// per buffer and section, gives blocks three quarters of what the
// portfolio and the dive leave, the skyline restarts 2^23 plus 1,024 per
// buffer and section, and the canonical search 20,000 nodes, within what
// is left, wherever the peak is above the lower bound on up to 1,024
// buffers (2^20 overlapping pairs), and on larger instances (blocks'
// problems aside) whose pairs fit in 2^22 where the peak is 0.5 to 5 %
// above it and what is left pays for a dive (six work units per square
// of its buffers). Where blocks leave the caller's problem of up to 8,192
// buffers more than 5 % above the bound, and the caller did not set the
// budget, Fast adds three times its budget and runs blocks again, keeping
// the lower result (about 3.6 times the planning time there: coarse 2,000
// seed 0, 0.60 s became 2.21 s; held out, dense and sliced 5,000 seeds
// 100 to 115 above +5 % went from 7 of 32 to 3, and none ended higher;
// Result.Budget says what was allowed). Where the peak is still more than
// 5 % above it there, the overlap search gets up to 2^28 units plus 1,024
// per buffer and section, what it spends added to the budget (out of what
// is left, where the caller set it; about a second at 2,000 buffers); at the
// exact effort, a quarter of DefaultExactBudget, within half of what is
// left. Held-out transformer training
// steps ended up to +1.65 % above the bound when the search ran only on
// up to 1,024 buffers more
// than 1 % above it (8 layers, seed 26, 1,363 buffers); the search's
// first dive, about as many nodes as buffers, places each at the bound.
// A dive of n buffers costs a few times n^2 units (up to a second at
// 4,000 buffers; from about 4,500 buffers the fast budget cannot pay for
// one), which is why larger instances already within +0.5 % are left as
// they are, and so are those more than 5 % above, tilings
// that blocks could not rebuild: on the suite's the search found nothing
// lower, and at the exact effort, which starts with the fast one, the
// exact steps missed the work it took (coarse 2,000 seeds 0 and 1 ended
// +12.40 and +12.97 % above the bound, where they end +11.76 and
// +11.94 %). The pairs are counted before any is built, so an instance
// with too many costs one sort. Exact allows DefaultExactBudget (2^32 units, 5
// to 31 s here): it first runs the fast effort (within at most half of it) and stops there if
// that reached the lower bound; otherwise it runs its own steps with the
// rest (blocks three quarters of what the portfolio and the dive leave,
// the skyline restarts up to a sixteenth of the total and the rest to the
// canonical search on instances of up to 2^20 buffers whose overlapping
// pairs fit in memory, 2^24) and keeps the lower of the two, so with its default budget it
// never ends above fast. A packing of blocks counts its greedy members
// as work like the rest, within its share, and is given up when they
// pass it (the guarantee against greedy-size is owed to the caller's
// problem, not to blocks'); their cost used to be reserved ahead at the
// whole instance's cost per buffer, which on tilings of thin pieces was
// several times what they cost, so that blocks packed nothing.
// Options.Budget replaces either effort's total. Pack stops within one
// search node of the budget and returns the best placement found, its
// lower bound, Result.Gap and whether it proved optimality.
//
// GreedySize is the classic baseline (largest first, first fit), kept for
// comparison.
package pack
