package datastore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tmmu/tmmu/checkpoint"
	"github.com/tmmu/tmmu/data"
	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/internal/natstest"
	"github.com/tmmu/tmmu/ir"
)

func tokens(n int, f func(i int) int) []byte {
	b := make([]byte, 2*n)
	for i := range n {
		binary.LittleEndian.PutUint16(b[2*i:], uint16(f(i)))
	}
	return b
}

// natsStore is a real JetStream object store bucket.
func natsStore(t *testing.T) checkpoint.Store {
	s := natstest.JetStream(t)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := checkpoint.NewNATSStore(context.Background(), js, checkpoint.NATSConfig{Bucket: Bucket})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestStoreAndRead stores a dataset of two files (one of several
// blocks) in a real JetStream object store, reads it back through a
// Reader as the local files would be read, and removes it.
func TestStoreAndRead(t *testing.T) {
	ctx := context.Background()
	objs := natsStore(t)
	s := New(objs)
	a := tokens(BlockSize/2*3+17, func(i int) int { return i % 1000 }) // 3 blocks and a bit
	b := tokens(100, func(i int) int { return 7 })
	ra, err := s.PutFile(ctx, "a.bin", bytes.NewReader(a))
	if err != nil {
		t.Fatal(err)
	}
	rb, err := s.PutFile(ctx, "b.bin", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if len(ra.Blocks) != 4 || ra.Size != uint64(len(a)) {
		t.Fatalf("a.bin: %d blocks, %d bytes", len(ra.Blocks), ra.Size)
	}
	m, digest, err := s.Commit(ctx, "toks", Request{Format: "uint16", Files: []FileRef{ra, rb}})
	if err != nil {
		t.Fatal(err)
	}
	// The digest is the one the same files give on disk.
	local, _ := data.Open(data.Uint16, []data.Source{mem("x", a), mem("y", b)}, nil)
	sum, _ := local.Scan(0)
	if m.Digest != sum.Digest || m.MaxToken != 999 || m.Len != uint64(len(a)+len(b))/2 || m.Kind != KindTokens {
		t.Fatalf("manifest %+v, local digest %x", m, sum.Digest)
	}
	got, d2, err := s.Resolve(ctx, "toks")
	if err != nil || d2 != digest || got.Digest != m.Digest {
		t.Fatalf("resolve: %v %v", err, d2)
	}
	// Rows read through the store equal rows read from memory, and a
	// second pass is served by the cache.
	r := NewReader(objs, 0)
	ds, err := r.Open(ctx, got)
	if err != nil {
		t.Fatal(err)
	}
	const S = 64
	s1, _ := data.NewStream(ds, data.Shuffled, 1, m.Digest, S, 4)
	s2, _ := data.NewStream(local, data.Shuffled, 1, m.Digest, S, 4)
	t1, l1, t2, l2 := make([]int32, 4*S), make([]int32, 4*S), make([]int32, 4*S), make([]int32, 4*S)
	for k := range uint64(50) {
		if err := s1.Tokens(k, 0, t1, l1); err != nil {
			t.Fatal(err)
		}
		s2.Tokens(k, 0, t2, l2)
		if !equal(t1, t2) || !equal(l1, l2) {
			t.Fatalf("step %d: the store and memory disagree", k)
		}
	}
	fetched := r.Fetched.Load()
	if fetched == 0 || fetched > uint64(len(a)+len(b)) {
		t.Errorf("fetched %d bytes of %d", fetched, len(a)+len(b))
	}
	for k := range uint64(50) {
		s1.Tokens(k, 0, t1, l1)
	}
	if r.Fetched.Load() != fetched {
		t.Errorf("the second pass fetched %d more bytes", r.Fetched.Load()-fetched)
	}
	list, err := s.List(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "toks" {
		t.Fatalf("list %v %v", list, err)
	}
	// A job pins the manifest: removing the name keeps it and its blocks.
	n, _, err := s.Remove(ctx, "toks", []ir.Hash{digest})
	if err != nil || n != 0 {
		t.Fatalf("remove with the manifest pinned removed %d: %v", n, err)
	}
	if _, err := s.Manifest(ctx, digest); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Resolve(ctx, "toks"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("resolve after remove: %v", err)
	}
	// Unpinned: the manifest and its 5 blocks go.
	n, bytes, err := s.Collect(ctx, nil)
	if err != nil || n != 6 || bytes < uint64(len(a)+len(b)) {
		t.Fatalf("collect removed %d objects, %d bytes: %v", n, bytes, err)
	}
	gone, err := NewReader(objs, 0).Open(ctx, got)
	if err == nil {
		_, err = gone.Scan(0)
	}
	if !errors.Is(err, failure.InvalidDataset) || !strings.Contains(err.Error(), "gone from the store") {
		t.Fatalf("reading a collected dataset: %v", err)
	}
}

func TestCommitRefuses(t *testing.T) {
	ctx := context.Background()
	dir, err := checkpoint.NewDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := New(dir)
	odd, _ := s.PutFile(ctx, "odd.bin", bytes.NewReader([]byte{1, 2, 3}))
	if _, _, err := s.Commit(ctx, "x", Request{Format: "uint16", Files: []FileRef{odd}}); !errors.Is(err, failure.InvalidDataset) || !strings.Contains(err.Error(), "mid-token") {
		t.Errorf("odd bytes: %v", err)
	}
	ghost := FileRef{Name: "ghost.bin", Size: 4, Blocks: []ir.Hash{{1}}}
	if _, _, err := s.Commit(ctx, "x", Request{Format: "uint16", Files: []FileRef{ghost}}); !errors.Is(err, failure.InvalidDataset) || !strings.Contains(err.Error(), "not stored") {
		t.Errorf("a block never stored: %v", err)
	}
	ok, _ := s.PutFile(ctx, "ok.bin", bytes.NewReader([]byte{1, 0, 2, 0}))
	for _, name := range []string{"", "../x", "a b", ".hidden", "a..b"} {
		if _, _, err := s.Commit(ctx, name, Request{Format: "uint16", Files: []FileRef{ok}}); !errors.Is(err, failure.InvalidOptions) {
			t.Errorf("name %q: %v", name, err)
		}
	}
	// A block whose bytes changed under its name is caught on read.
	if _, _, err := s.Commit(ctx, "ok", Request{Format: "uint16", Files: []FileRef{ok}}); err != nil {
		t.Fatal(err)
	}
	m, _, _ := s.Resolve(ctx, "ok")
	if err := dir.Put(ctx, blockName(ok.Blocks[0]), []byte{9, 0, 9, 0}); err != nil {
		t.Fatal(err)
	}
	ds, err := NewReader(dir, 0).Open(ctx, m)
	if err == nil {
		_, err = ds.Scan(0)
	}
	if !errors.Is(err, failure.DatasetChanged) {
		t.Errorf("a changed block: %v", err)
	}
}

func equal(a, b []int32) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return len(a) == len(b)
}

type memSrc struct {
	*bytes.Reader
	name string
}

func (m memSrc) Name() string { return m.name }

func mem(name string, b []byte) data.Source { return memSrc{bytes.NewReader(b), name} }

// TestRangeReads: a Reader's range reads return the stored bytes across
// block boundaries and the label files after the files; a dataset read
// through RemoteSources over them gives the rows the local files give
// and fetches exactly the bytes it reads; concurrent reads of a block
// fetch it once; bad ranges are refused by name.
func TestRangeReads(t *testing.T) {
	ctx := context.Background()
	objs := natsStore(t)
	s := New(objs)
	a := tokens(BlockSize/2*2+5, func(i int) int { return (i * 7) % 900 }) // 2 blocks and a bit
	ra, err := s.PutFile(ctx, "a.bin", bytes.NewReader(a))
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := s.Commit(ctx, "toks", Request{Format: "uint16", Files: []FileRef{ra}})
	if err != nil {
		t.Fatal(err)
	}
	r := NewReader(objs, 0)
	for _, c := range []struct{ off, n uint64 }{{0, 10}, {BlockSize - 3, 9}, {uint64(len(a)) - 4, 100}, {uint64(len(a)), 10}} {
		got, err := r.ReadRange(ctx, m, 0, c.off, c.n)
		if err != nil {
			t.Fatal(err)
		}
		if want := a[c.off:min(c.off+c.n, uint64(len(a)))]; !bytes.Equal(got, want) {
			t.Errorf("[%d, +%d): %d bytes, not the stored %d", c.off, c.n, len(got), len(want))
		}
	}
	for _, c := range []struct {
		i       int
		off, n  uint64
		code    failure.Code
		message string
	}{
		{1, 0, 1, "", "no file 1"},
		{0, 0, MaxRead + 1, failure.InvalidOptions, "at most"},
		{0, uint64(len(a)) + 1, 1, failure.InvalidOptions, "past the end of a.bin"},
	} {
		_, err := r.ReadRange(ctx, m, c.i, c.off, c.n)
		if err == nil || !strings.Contains(err.Error(), c.message) || (c.code != "" && !errors.Is(err, c.code)) || (c.code == "" && !errors.Is(err, ErrNotFound)) {
			t.Errorf("file %d [%d, +%d): %v, want %s %q", c.i, c.off, c.n, err, c.code, c.message)
		}
	}

	// Through RemoteSources: the rows of the local files, fetched exactly.
	var fetched atomic.Uint64
	read := func(ctx context.Context, i int, off, n uint64) ([]byte, error) { return r.ReadRange(ctx, m, i, off, n) }
	files, _ := RemoteSources(ctx, m, read, &fetched)
	remote, err := data.Open(data.Uint16, files, nil)
	if err != nil {
		t.Fatal(err)
	}
	local, _ := data.Open(data.Uint16, []data.Source{mem("a", a)}, nil)
	const S = 32
	s1, _ := data.NewStream(remote, data.Sequential, 1, m.Digest, S, 2)
	s2, _ := data.NewStream(local, data.Sequential, 1, m.Digest, S, 2)
	t1, l1, t2, l2 := make([]int32, S), make([]int32, S), make([]int32, S), make([]int32, S)
	for k := range uint64(20) {
		if err := s1.Tokens(k, 1, t1, l1); err != nil { // the second row of each step
			t.Fatal(err)
		}
		s2.Tokens(k, 1, t2, l2)
		if !equal(t1, t2) || !equal(l1, l2) {
			t.Fatalf("step %d: the range reads and memory disagree", k)
		}
	}
	if fetched.Load() != remote.BytesRead() || fetched.Load() != 20*(S+1)*2 {
		t.Errorf("fetched %d bytes, read %d, want %d", fetched.Load(), remote.BytesRead(), 20*(S+1)*2)
	}

	// Eight concurrent reads of an uncached block fetch it once.
	fresh := NewReader(objs, 0)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := fresh.ReadRange(ctx, m, 0, BlockSize+100, 10); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if got := fresh.Fetched.Load(); got != BlockSize {
		t.Errorf("8 concurrent reads of one block fetched %d bytes, want %d", got, BlockSize)
	}
}
