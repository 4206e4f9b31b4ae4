// Package pack places buffers with known lifetimes at byte offsets so that
// no two buffers live at the same time share a byte, aiming at the lowest
// peak: offline dynamic storage allocation. It is the engine of the
// planner's packed strategy, and it is pure: values in, values out, no
// clock, no goroutines, so every machine computes the same offsets.
//
// # Problem
//
// A Problem lists Buffers, each live over [Start, End) with a Size and an
// Align, plus optional Conflicts (pairs that must never share a byte, for
// must_not_alias) and a Capacity. LowerBound is the most bytes live at one
// instant; no placement peaks lower. Check is the obviously right
// quadratic checker the tests hold every placement to.
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
// Pack first runs a fixed portfolio of greedy placements: buffers taken in
// one order (by conflict pressure, by the busiest instant they live at, by
// birth, size, lifetime or area), each put in the smallest gap it fits
// (best fit) or the lowest (first fit) among the buffers already placed
// that it meets. Finding those gaps is the hot path: a segment tree over
// time keeps, per node, the merged byte ranges of the buffers placed in its
// subtree and of those covering it, so a query merges O(log T) short sets
// instead of visiting every buffer met (28,526 buffers with 43 million
// overlapping pairs take about 0.2 s per placement). Members run while the
// work spent, counted in byte ranges merged, stays under the effort's
// budget; the largest instances get the first member only.
//
// # Search
//
// When the portfolio stays above the lower bound on an instance small
// enough, a depth-first search over canonical placements takes over (the
// approach of Moffitt's MiniMalloc, ASPLOS 2023, implemented anew): buffers
// go down in nondecreasing offset order, each at the lowest offset its
// placed neighbours leave; candidates are ordered by that offset and a
// preorder (width, area, total: MiniMalloc's WAT, TAW, TWA, each also with
// split-off parts ordered anew by the bytes they still need, tried in turn
// with doubling node limits); dominated placements, identical twins
// out of preorder and placements that leave some section unable to hold
// its remaining bytes are cut; a section boundary no unplaced buffer
// crosses splits the rest into independent parts. It first asks for the
// lower bound, then bisects between it and the best peak found. Its work
// is counted in nodes.
//
// Effort Fast (the default) stops the portfolio once its members have
// merged 2^20 byte ranges and gives the search 20,000 nodes on instances of
// up to 1,024 buffers that the portfolio leaves more than 1 % above the
// lower bound; Exact runs the whole portfolio (up to 2^27 ranges) and gives
// the search 1,000,000 nodes on any instance above the lower bound whose
// overlapping pairs fit in memory (2^24). Result.Optimal tells whether the peak is
// proven optimal: equal to the lower bound, or with every placement below
// it explored.
//
// GreedySize is the classic baseline (largest first, first fit), kept for
// comparison.
package pack
