package pack

import (
	"slices"
	"sync"
	"sync/atomic"
)

// lookahead is how many of blocks' orders run at once with a spawner:
// the development VM's two cores.
const lookahead = 2

// ahead hands over f(0), f(1), …, f(n-1) through get, in any order of
// calls. With spawn (see Options.Spawn) they run on the caller's
// goroutines, up to lookahead of them at once, ahead of the highest index
// asked for; without, get(i) computes f(i) itself. Each f(i) must depend
// on i alone and write nothing it does not own, so that the results,
// folded in index order, are the same either way. wait waits for the
// computations still running; the caller must call it before it
// returns, even when it stops asking early.
func ahead[T any](n int, spawn func(func()), f func(i int) T) (get func(i int) T, wait func()) {
	if spawn == nil {
		return f, func() {}
	}
	out := make([]chan T, n)
	for i := range out {
		out[i] = make(chan T, 1)
	}
	var wg sync.WaitGroup
	started := 0
	get = func(i int) T {
		for ; started < min(i+lookahead, n); started++ {
			j := started
			wg.Add(1)
			spawn(func() {
				defer wg.Done()
				out[j] <- f(j)
			})
		}
		return <-out[i]
	}
	return get, wg.Wait
}

// all runs the tasks and returns once every one has: with spawn, all but
// the last on the caller's goroutines and the last on this one; without,
// one after the other.
func all(spawn func(func()), tasks []func()) {
	if spawn == nil || len(tasks) < 2 {
		for _, t := range tasks {
			t()
		}
		return
	}
	var wg sync.WaitGroup
	for _, t := range tasks[:len(tasks)-1] {
		wg.Add(1)
		spawn(func() {
			defer wg.Done()
			t()
		})
	}
	tasks[len(tasks)-1]()
	wg.Wait()
}

// firstOf runs the tasks as all does, each given a halt of its own under
// parent, and returns the index of the first, in order, that reports
// success (len(tasks) if none does). When one does, the halts of those
// after it are set: the caller throws their results away, as they would
// not have run one after the other, so they may stop early.
func firstOf(spawn func(func()), parent *halt, tasks []func(h *halt) bool) int {
	halts := make([]*halt, len(tasks))
	ok := make([]bool, len(tasks))
	run := make([]func(), len(tasks))
	for i, t := range tasks {
		halts[i] = &halt{parent: parent}
		run[i] = func() {
			if ok[i] = t(halts[i]); ok[i] {
				for _, h := range halts[i+1:] {
					h.flag.Store(true)
				}
			}
		}
	}
	all(spawn, run)
	if i := slices.Index(ok, true); i >= 0 {
		return i
	}
	return len(tasks)
}

// A halt tells computations that run ahead of need (blocks' orders, the
// trials of a refine batch after one that reached the goal) that their
// results will be thrown away, so they may stop early. What a halted
// computation returns is never used, so halting changes no result, only
// the time. A halt also holds once its parent's does.
type halt struct {
	flag   atomic.Bool
	parent *halt
}

// done reports whether h or an ancestor was set; a nil halt never is.
func (h *halt) done() bool {
	for ; h != nil; h = h.parent {
		if h.flag.Load() {
			return true
		}
	}
	return false
}
