// Package minheap is a binary min-heap over a slice, ordered by a less
// function: the one heap the IR's topological sort and the slots planner
// share. Its sift order is fixed (a parent yields only to a strictly
// smaller child, the left one first), so equal elements come out in the
// same order on every machine, which plan hashes depend on.
package minheap

// Heap is a min-heap of T by less.
type Heap[T any] struct {
	a    []T
	less func(x, y T) bool
}

// New returns an empty heap ordered by less.
func New[T any](less func(x, y T) bool) *Heap[T] { return &Heap[T]{less: less} }

// Len is the number of elements.
func (h *Heap[T]) Len() int { return len(h.a) }

// Reset empties the heap, keeping its storage.
func (h *Heap[T]) Reset() { h.a = h.a[:0] }

// Top is the smallest element; the heap must not be empty.
func (h *Heap[T]) Top() T { return h.a[0] }

// Push adds x.
func (h *Heap[T]) Push(x T) {
	h.a = append(h.a, x)
	for i := len(h.a) - 1; i > 0; {
		p := (i - 1) / 2
		if !h.less(h.a[i], h.a[p]) {
			break
		}
		h.a[p], h.a[i] = h.a[i], h.a[p]
		i = p
	}
}

// Pop removes and returns the smallest element; the heap must not be
// empty.
func (h *Heap[T]) Pop() T {
	top := h.a[0]
	n := len(h.a) - 1
	h.a[0] = h.a[n]
	h.a = h.a[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && h.less(h.a[l], h.a[m]) {
			m = l
		}
		if r < n && h.less(h.a[r], h.a[m]) {
			m = r
		}
		if m == i {
			return top
		}
		h.a[i], h.a[m] = h.a[m], h.a[i]
		i = m
	}
}
