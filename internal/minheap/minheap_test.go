package minheap

import (
	"container/heap"
	"math/rand/v2"
	"testing"
)

// ref is container/heap over pairs compared by key only, so that ties
// show the sift order.
type ref []pair

type pair struct{ key, id int }

func (r ref) Len() int           { return len(r) }
func (r ref) Less(i, j int) bool { return r[i].key < r[j].key }
func (r ref) Swap(i, j int)      { r[i], r[j] = r[j], r[i] }
func (r *ref) Push(x any)        { *r = append(*r, x.(pair)) }
func (r *ref) Pop() any {
	old := *r
	x := old[len(old)-1]
	*r = old[:len(old)-1]
	return x
}

// TestSameOrderAsContainerHeap: with many equal keys, the heap pops in
// exactly container/heap's order (its sift order is the standard one),
// through random pushes and pops.
func TestSameOrderAsContainerHeap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	h := New(func(x, y pair) bool { return x.key < y.key })
	var c ref
	for step := range 20000 {
		if r.IntN(3) > 0 || h.Len() == 0 {
			p := pair{r.IntN(8), step}
			h.Push(p)
			heap.Push(&c, p)
			continue
		}
		if got, want := h.Pop(), heap.Pop(&c).(pair); got != want {
			t.Fatalf("step %d: popped %v, container/heap %v", step, got, want)
		}
	}
	for h.Len() > 0 {
		if got, want := h.Pop(), heap.Pop(&c).(pair); got != want {
			t.Fatalf("draining: popped %v, container/heap %v", got, want)
		}
	}
}
