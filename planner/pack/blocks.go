package pack

import (
	"cmp"
	"math/bits"
	"slices"
)

// A block is a rectangle of buffers whose offsets relative to the block
// are fixed: a buffer (a leaf), a stack of blocks live over the same
// sections, one on top of the other, or a chain of blocks of the same
// size, one after the other in time, at the same offset.
type block struct {
	start, end int32 // sections
	size       uint64
	align      uint64
	buf        int32   // the buffer of a leaf, -1 otherwise
	parts      []int32 // the blocks of a stack or chain
	rel        []uint64
	dead       bool  // merged into another block
	stacked    bool  // a stack
	parent     int32 // the block it was merged into, -1 if none
	dissolved  bool  // taken apart (a stack spliced into another, or by a repair)
}

type ivKey struct{ s, e int32 }

type edgeKey struct {
	t    int32
	size uint64
}

// blocker merges buffers into blocks bottom up, as the cuts of a
// guillotine tiling are found again: blocks live over exactly the same
// sections stack (their order inside the stack changes nothing outside
// it), and a block whose end meets the start of a block of the same size
// chains with it (they can share their bytes, as a buffer freed and one
// of the same size allocated at that instant do). A chain is made when
// the pair is the only candidate on both sides, a chain among several
// candidates only when no other merge is left.
//
// Stacks are sure merges on a tiling, but not on every instance: blocks
// of different parts may live over the same sections by coincidence, and
// a stack of them can take a block from the chain it belongs to. With
// repair set, once no merge is left, such a block (one that could chain
// with a block of another root, and only with it) is freed from the
// blocks around it and chained.
type blocker struct {
	in     *instance
	blocks []block
	// Live blocks by lifetime, by start and size, by end and size, and by
	// start or end alone; dead entries are dropped as lists are read.
	byLife           map[ivKey][]int32
	byStart, byEnd   map[edgeKey][]int32
	starting, ending map[int32][]int32
	// Every block not taken apart, by start and size and by end and size.
	madeStart, madeEnd map[edgeKey][]int32
	alive, work        int64
	repair             bool
	repairs            int
	// seen marks the blocks a list read has met (at epoch), so that a
	// block indexed twice (revived by a repair) counts once.
	seen  []uint32
	epoch uint32
}

func newBlocker(in *instance) *blocker {
	k := &blocker{in: in, byLife: map[ivKey][]int32{}, byStart: map[edgeKey][]int32{}, byEnd: map[edgeKey][]int32{},
		starting: map[int32][]int32{}, ending: map[int32][]int32{},
		madeStart: map[edgeKey][]int32{}, madeEnd: map[edgeKey][]int32{}}
	for i := range in.bufs {
		k.add(block{start: in.start[i], end: in.end[i], size: in.bufs[i].Size, align: in.bufs[i].align(), buf: int32(i)})
	}
	return k
}

func (k *blocker) add(b block) int32 {
	id := int32(len(k.blocks))
	b.parent = -1
	k.blocks = append(k.blocks, b)
	k.seen = append(k.seen, 0)
	for _, q := range b.parts {
		k.blocks[q].parent = id
	}
	k.index(id)
	k.indexMade(id)
	k.alive++
	return id
}

// index adds block id to the lookups.
func (k *blocker) index(id int32) {
	b := &k.blocks[id]
	k.byLife[ivKey{b.start, b.end}] = append(k.byLife[ivKey{b.start, b.end}], id)
	k.byStart[edgeKey{b.start, b.size}] = append(k.byStart[edgeKey{b.start, b.size}], id)
	k.byEnd[edgeKey{b.end, b.size}] = append(k.byEnd[edgeKey{b.end, b.size}], id)
	k.ending[b.end] = append(k.ending[b.end], id)
	k.starting[b.start] = append(k.starting[b.start], id)
}

// indexMade adds a new block id to the lookups of every block made.
func (k *blocker) indexMade(id int32) {
	b := &k.blocks[id]
	k.madeStart[edgeKey{b.start, b.size}] = append(k.madeStart[edgeKey{b.start, b.size}], id)
	k.madeEnd[edgeKey{b.end, b.size}] = append(k.madeEnd[edgeKey{b.end, b.size}], id)
}

// endsAt and startsAt return the live blocks ending or starting at
// section t.
func (k *blocker) endsAt(t int32) []int32 { return liveAt(k, k.ending, t, -1) }

func (k *blocker) startsAt(t int32) []int32 { return liveAt(k, k.starting, t, -1) }

// liveAt returns the live blocks listed in m under key, other than not,
// and drops the dead ones from the list.
func liveAt[K comparable](k *blocker, m map[K][]int32, key K, not int32) []int32 {
	l := m[key]
	kept := l[:0]
	var out []int32
	k.epoch++
	for _, id := range l {
		if !k.blocks[id].dead && k.seen[id] != k.epoch {
			k.seen[id] = k.epoch
			kept = append(kept, id)
			if id != not {
				out = append(out, id)
			}
		}
	}
	k.work += int64(len(l))
	m[key] = kept
	return out
}

// stack makes a block of ids, which live over the same sections: the
// larger alignments first, each part at the next offset its alignment
// allows; parts that are stacks are spliced in. It returns -1, merging
// nothing, if the offsets would overflow.
func (k *blocker) stack(ids []int32) int32 {
	slices.SortFunc(ids, func(a, b int32) int {
		x, y := &k.blocks[a], &k.blocks[b]
		return cmp.Or(cmp.Compare(y.align, x.align), cmp.Compare(a, b)) // larger alignment first
	})
	nb := block{start: k.blocks[ids[0]].start, end: k.blocks[ids[0]].end, buf: -1, stacked: true}
	for _, id := range ids {
		if x := &k.blocks[id]; x.stacked {
			nb.parts = append(nb.parts, x.parts...)
		} else {
			nb.parts = append(nb.parts, id)
		}
	}
	var off uint64
	for _, id := range nb.parts {
		x := &k.blocks[id]
		at, ok := alignUp(off, x.align)
		end, carry := bits.Add64(at, x.size, 0)
		if !ok || carry != 0 {
			return -1
		}
		nb.rel = append(nb.rel, at)
		off = end
		nb.align = max(nb.align, x.align)
	}
	nb.size = off
	for _, id := range ids {
		if x := &k.blocks[id]; x.stacked {
			x.dissolved = true
		}
		k.blocks[id].dead = true
	}
	for _, id := range nb.parts {
		k.blocks[id].dead = true
	}
	k.alive -= int64(len(ids))
	return k.add(nb)
}

// chain makes a block of a and, after it in time, b, of the same size.
func (k *blocker) chain(a, b int32) int32 {
	x, y := &k.blocks[a], &k.blocks[b]
	nb := block{start: x.start, end: y.end, size: x.size, align: max(x.align, y.align), buf: -1,
		parts: []int32{a, b}, rel: []uint64{0, 0}}
	x.dead, y.dead = true, true
	k.alive -= 2
	return k.add(nb)
}

// step merges block id, if it can, with the blocks live over the same
// sections, or else chains it (with any candidate when anyChain is set);
// it returns the new block or -1.
func (k *blocker) step(id int32, anyChain bool) int32 {
	b := k.blocks[id]
	if b.dead {
		return -1
	}
	iv := ivKey{b.start, b.end}
	same := liveAt(k, k.byLife, iv, -1)
	if len(same) >= 2 {
		if nb := k.stack(slices.Clone(same)); nb >= 0 {
			return nb
		}
	}
	return k.chains(id, anyChain)
}

// mend finds a block that could chain with a block of another root, and
// only with it, frees both from the blocks holding them and chains them;
// it reports whether it did.
func (k *blocker) mend() bool {
	for a := range int32(len(k.blocks)) {
		x := &k.blocks[a]
		if x.dissolved || x.dead && x.parent < 0 {
			continue
		}
		after := k.kept(k.madeStart[edgeKey{x.end, x.size}], a)
		if len(after) != 1 {
			continue
		}
		b := after[0]
		if len(k.kept(k.madeEnd[edgeKey{x.end, x.size}], b)) != 1 {
			continue
		}
		if k.root(a) == k.root(b) || x.parent < 0 && k.blocks[b].parent < 0 {
			continue
		}
		if x.parent >= 0 {
			k.free(a)
		}
		if k.blocks[b].parent >= 0 {
			k.free(b)
		}
		k.repairs++
		k.chain(a, b)
		return true
	}
	return false
}

// kept returns the blocks of l not taken apart, but for not.
func (k *blocker) kept(l []int32, not int32) []int32 {
	var out []int32
	for _, id := range l {
		if !k.blocks[id].dissolved && id != not {
			out = append(out, id)
		}
	}
	k.work += int64(len(l))
	return out
}

// root returns the outermost block holding block id.
func (k *blocker) root(id int32) int32 {
	for k.blocks[id].parent >= 0 {
		id = k.blocks[id].parent
		k.work++
	}
	return id
}

// free takes apart the blocks that hold block a, from the outermost in,
// and makes a and the other parts live blocks again.
func (k *blocker) free(a int32) {
	var path []int32
	for p := k.blocks[a].parent; p >= 0; p = k.blocks[p].parent {
		path = append(path, p)
	}
	root := path[len(path)-1]
	k.blocks[root].dead, k.blocks[root].dissolved = true, true
	k.alive--
	for _, p := range path {
		k.blocks[p].dissolved = true
		for _, q := range k.blocks[p].parts {
			if !slices.Contains(path, q) {
				k.revive(q)
			}
		}
	}
	k.revive(a)
}

// revive makes a part of a block taken apart a live block.
func (k *blocker) revive(id int32) {
	b := &k.blocks[id]
	b.dead, b.parent = false, -1
	k.index(id)
	k.alive++
}

// chains chains block id with the block after or before it, when each is
// the other's only candidate or anyChain is set.
func (k *blocker) chains(id int32, anyChain bool) int32 {
	b := k.blocks[id]
	after, before := edgeKey{b.end, b.size}, edgeKey{b.start, b.size}
	if right := liveAt(k, k.byStart, after, id); len(right) > 0 {
		back := liveAt(k, k.byEnd, after, -1)
		if len(right) == 1 && len(back) == 1 || anyChain {
			return k.chain(id, right[0])
		}
	}
	if left := liveAt(k, k.byEnd, before, id); len(left) > 0 {
		fwd := liveAt(k, k.byStart, before, -1)
		if len(left) == 1 && len(fwd) == 1 || anyChain {
			return k.chain(left[0], id)
		}
	}
	return -1
}

// run merges until no merge is left or work passes limit: the sure
// merges first, then, one at a time, a repair or a chain among several
// candidates, and the sure merges they allow.
func (k *blocker) run(limit int64) {
	queue := make([]int32, 0, len(k.blocks))
	for i := range k.blocks {
		queue = append(queue, int32(i))
	}
	for k.alive > 1 && k.work < limit {
		for len(queue) > 0 && k.work < limit {
			id := queue[0]
			queue = queue[1:]
			if nb := k.step(id, false); nb >= 0 {
				queue = append(queue, nb)
				queue = append(queue, k.neighbours(nb)...)
			}
		}
		merged := k.repair && k.repairs < len(k.in.bufs)/8 && k.mend()
		for i := range k.blocks {
			if merged || k.work >= limit {
				break
			}
			merged = k.step(int32(i), true) >= 0
			k.work++
		}
		if !merged {
			return
		}
		for i := range k.blocks {
			if !k.blocks[i].dead {
				queue = append(queue, int32(i))
			}
		}
		k.work += int64(len(k.blocks))
	}
}

// neighbours returns the live blocks that a merge into nb may have made
// mergeable: those ending where it starts, starting where it ends, and
// live over its sections.
func (k *blocker) neighbours(nb int32) []int32 {
	b := &k.blocks[nb]
	var out []int32
	for _, l := range [][]int32{k.endsAt(b.start), k.startsAt(b.end), k.byLife[ivKey{b.start, b.end}]} {
		for _, n := range l {
			if n != nb && !k.blocks[n].dead {
				out = append(out, n)
			}
		}
	}
	return out
}

// roots returns the blocks left.
func (k *blocker) roots() []int32 {
	var r []int32
	for i := range k.blocks {
		if !k.blocks[i].dead {
			r = append(r, int32(i))
		}
	}
	return r
}

// expand writes the offsets of block id's buffers, the block at off.
func (k *blocker) expand(id int32, off uint64, offsets []uint64) {
	b := &k.blocks[id]
	if b.buf >= 0 {
		offsets[b.buf] = off
		return
	}
	for j, p := range b.parts {
		k.expand(p, off+b.rel[j], offsets)
	}
}

// blocks places the buffers as blocks: it merges them, then packs the
// blocks left as buffers of their own within work, with o's effort and
// nodes. While the peak stays above the goal, the blocks placed above it
// are taken apart one level and the rest packed again. It merges without
// repairs, with half of work, then with them, with what is left. It
// reports the work spent.
func blocks(in *instance, o Options, work int64, res *Result) int64 {
	var spent int64
	for v, repair := range []bool{false, true} {
		if res.Peak <= in.goal || spent >= work {
			break
		}
		spent += blocksBy(in, repair, o, (work-spent)/int64(2-v), res)
	}
	return spent
}

// blockRounds bounds the rounds of taking blocks apart.
const blockRounds = 8

func blocksBy(in *instance, repair bool, o Options, work int64, res *Result) int64 {
	k := newBlocker(in)
	k.repair = repair
	k.run(work)
	roots := k.roots()
	spent := k.work
	if 2*len(roots) > len(in.bufs) {
		return spent // too few merges to pay for packing again
	}
	for round := 0; res.Peak > in.goal; round++ {
		// The packing's mandatory members run whatever its budget: they
		// are paid for ahead, at the whole instance's cost per buffer.
		reserve := mergeCost * res.mandatory * int64(len(roots)) / int64(len(in.bufs))
		if spent+reserve >= work {
			break
		}
		sub := &Problem{Buffers: make([]Buffer, len(roots))}
		for j, id := range roots {
			x := &k.blocks[id]
			sub.Buffers[j] = Buffer{Start: int64(x.start), End: int64(x.end), Size: x.size, Align: x.align}
		}
		r, err := pack(sub, Options{Effort: o.Effort, Nodes: o.Nodes}, work-spent-reserve)
		if err != nil {
			return spent
		}
		spent += r.Work + mergeCost*r.mandatory
		res.Nodes += r.Nodes
		if r.Peak < res.Peak {
			for j, id := range roots {
				k.expand(id, r.Offsets[j], res.Offsets)
			}
			res.Peak, res.Method = r.Peak, "blocks, then "+r.Method
		}
		var next []int32
		for j, id := range roots {
			if x := &k.blocks[id]; r.Offsets[j]+x.size > in.goal && x.buf < 0 {
				next = append(next, x.parts...)
			} else {
				next = append(next, id)
			}
		}
		if len(next) == len(roots) || round >= blockRounds {
			break
		}
		roots = next
	}
	return spent
}
