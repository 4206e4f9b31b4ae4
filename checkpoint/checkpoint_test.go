package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"pgregory.net/rapid"

	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/internal/natstest"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/models"
	"github.com/tmmu/tmmu/shard"
)

// value is the synthetic state: element k of tensor id.
func value(id string, k uint64) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(id); i++ {
		h = (h ^ uint32(id[i])) * 16777619
	}
	return h ^ uint32(k*2654435761) | 1 // never zero, so padding is told apart
}

// stateOf fills a layout from value: the words a rank of that layout holds.
func stateOf(layout []Slice) map[string][]uint32 {
	out := map[string][]uint32{}
	for _, s := range layout {
		w := make([]uint32, s.Count)
		for i := range w {
			if k := s.Offset + uint64(i); k < s.Numel {
				w[i] = value(s.ID, k)
			}
		}
		out[s.ID] = w
	}
	return out
}

// fataler is what the helpers need of a *testing.T or a *rapid.T.
type fataler interface {
	Helper()
	Fatal(args ...any)
}

func tinyGPT2(t fataler) *ir.Model {
	m, err := models.GPT2(models.GPT2Config{Layers: 1, Hidden: 32, Heads: 2, Seq: 8, Context: 8, Batch: 1, Vocab: 37, DType: ir.F32, Train: true})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// layouts returns every rank's layout of m under ZeRO stage over world.
func layouts(t fataler, m *ir.Model, world, stage uint64) [][]Slice {
	t.Helper()
	spec, err := shard.Decode([]byte(fmt.Sprintf(`{"world_size": %d, "data_parallel": {"zero_stage": %d}}`, world, stage)))
	if err != nil {
		t.Fatal(err)
	}
	var out [][]Slice
	for r := range world {
		v, err := shard.RankView(m, spec, r)
		if err != nil {
			t.Fatal(err)
		}
		l, err := Layout(v.Graph, m, r, world)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	return out
}

// shards writes every rank's shard of the synthetic state at step and
// decodes it back, as a restore reads it.
func shards(t fataler, ls [][]Slice, step uint64) []*Shard {
	t.Helper()
	var out []*Shard
	for r, l := range ls {
		ts, err := FromState(l, stateOf(l))
		if err != nil {
			t.Fatal(err)
		}
		s := &Shard{Step: step, Rank: uint64(r), World: uint64(len(ls)), Seed: 7, OptimizerStep: step + 1, Tensors: ts}
		b, d, err := Encode(s)
		if err != nil {
			t.Fatal(err)
		}
		back, err := Decode(b, d)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, back)
	}
	return out
}

func TestRoundTripAndCorruption(t *testing.T) {
	m := tinyGPT2(t)
	l := layouts(t, m, 2, 3)[1]
	ts, err := FromState(l, stateOf(l))
	if err != nil {
		t.Fatal(err)
	}
	s := &Shard{Step: 40, Rank: 1, World: 2, Seed: 3, OptimizerStep: 41, Tensors: ts, StateHash: ir.Hash{1}}
	b, d, err := Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	b2, d2, _ := Encode(s)
	if d != d2 || !slices.Equal(b, b2) {
		t.Fatal("encoding is not deterministic")
	}
	back, err := Decode(b, d)
	if err != nil {
		t.Fatal(err)
	}
	for id, w := range back.Words() {
		if !slices.Equal(w, stateOf(l)[id]) {
			t.Fatalf("tensor %s did not round-trip", id)
		}
	}
	// Every single flipped byte is caught by the digest.
	for _, at := range []int{0, len(b) / 2, len(b) - 1} {
		bad := slices.Clone(b)
		bad[at] ^= 0x10
		_, err := Decode(bad, d)
		if !errors.Is(err, failure.CheckpointCorrupt) {
			t.Fatalf("byte %d flipped: %v, want CHECKPOINT_CORRUPT", at, err)
		}
	}
	t.Logf("a %d-byte shard of %d tensors; a flipped byte: %v", len(b), len(ts), func() error { bad := slices.Clone(b); bad[9] ^= 1; _, err := Decode(bad, d); return err }())
}

// TestLayoutOfZeROViews: whole tensors under ZeRO 0, partitions of
// optimizer state under stage 1, of parameters too under stage 3; the
// partitions of all ranks tile every tensor.
func TestLayoutOfZeROViews(t *testing.T) {
	m := tinyGPT2(t)
	for _, stage := range []uint64{0, 1, 3} {
		ls := layouts(t, m, 3, stage)
		partitioned := 0
		for _, s := range ls[2] {
			if s.Count != s.Numel {
				partitioned++
				if s.Offset != 2*s.Count {
					t.Errorf("stage %d: %s offset %d, want %d", stage, s.ID, s.Offset, 2*s.Count)
				}
			}
		}
		switch {
		case stage == 0 && partitioned != 0, stage > 0 && partitioned == 0:
			t.Errorf("stage %d: %d partitioned tensors", stage, partitioned)
		}
		whole, err := Gather(shards(t, ls, 5))
		if err != nil {
			t.Fatal(err)
		}
		for id, w := range whole {
			for k, x := range w {
				if x != value(id, uint64(k)) {
					t.Fatalf("stage %d: gathered %s[%d] = %d", stage, id, k, x)
				}
			}
		}
		t.Logf("ZeRO-%d over 3 ranks: %d tensors, %d partitioned on rank 2", stage, len(ls[2]), partitioned)
	}
}

// TestRecutAnyWorld: a checkpoint written under world n restores under
// world m: every new rank holds exactly its partition of the whole state,
// padding zero (a property over n, m and the ZeRO stage).
func TestRecutAnyWorld(t *testing.T) {
	m := tinyGPT2(t)
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.Uint64Range(1, 6).Draw(rt, "from")
		w := rapid.Uint64Range(1, 6).Draw(rt, "to")
		stage := rapid.SampledFrom([]uint64{0, 1, 2, 3}).Draw(rt, "stage")
		src := shards(rt, layouts(rt, m, n, stage), 9)
		for r, l := range layouts(rt, m, w, stage) {
			got, err := Recut(src, l)
			if err != nil {
				rt.Fatalf("rank %d of %d from %d: %v", r, w, n, err)
			}
			want := stateOf(l)
			for id := range want {
				if !slices.Equal(got[id], want[id]) {
					rt.Fatalf("rank %d of %d from %d (ZeRO-%d): tensor %s differs", r, w, n, stage, id)
				}
			}
		}
	})
}

func TestRecutRefusesGapsAndDisagreement(t *testing.T) {
	m := tinyGPT2(t)
	src := shards(t, layouts(t, m, 4, 3), 9)
	l := layouts(t, m, 2, 3)[0]
	if _, err := Recut(src[1:], l); !errors.Is(err, failure.CheckpointCorrupt) {
		t.Errorf("a missing shard: %v", err)
	} else {
		t.Logf("a missing shard: %v", err)
	}
	other := *src[1]
	other.Step = 10
	if _, err := Recut([]*Shard{src[0], &other, src[2], src[3]}, l); !errors.Is(err, failure.CheckpointCorrupt) {
		t.Errorf("shards of two steps: %v", err)
	}
	if _, err := Recut(nil, l); err == nil {
		t.Error("no shards at all was accepted")
	}
}

func TestObjectNames(t *testing.T) {
	d := ir.Hash{0xab, 0xcd}
	name := ObjectName("job-1", 50, 3, d)
	job, step, rank, digest, err := ParseName(name)
	if err != nil || job != "job-1" || step != 50 || rank != 3 || digest != d {
		t.Fatalf("%s: %s %d %d %s %v", name, job, step, rank, digest, err)
	}
	for _, bad := range []string{"a/b", "j/x/1/" + d.String(), "j/1/x/" + d.String(), "j/1/2/zz"} {
		if _, _, _, _, err := ParseName(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// storeContract runs the Store contract on s.
func storeContract(t *testing.T, s Store) {
	ctx := context.Background()
	a, b := ObjectName("j", 10, 0, ir.Hash{1}), ObjectName("j", 10, 1, ir.Hash{2})
	if err := s.Put(ctx, a, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, a, []byte("hello")); err != nil { // idempotent
		t.Fatal(err)
	}
	if err := s.Put(ctx, b, []byte("world!")); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, ObjectName("k", 1, 0, ir.Hash{3}), []byte("other job")); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, a)
	if err != nil || string(got) != "hello" {
		t.Fatalf("get: %q %v", got, err)
	}
	if _, err := s.Get(ctx, ObjectName("j", 11, 0, ir.Hash{1})); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a missing object: %v", err)
	}
	list, err := s.List(ctx, JobPrefix("j"))
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(list, func(x, y Object) int { return cmpString(x.Name, y.Name) })
	if len(list) != 2 || list[0] != (Object{a, 5}) || list[1] != (Object{b, 6}) {
		t.Fatalf("list: %+v", list)
	}
	if err := s.Delete(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, a); err != nil {
		t.Fatalf("deleting twice: %v", err)
	}
	if _, err := s.Get(ctx, a); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a deleted object: %v", err)
	}
	if err := s.Put(ctx, "../escape", []byte("x")); err == nil {
		t.Fatal("a name with .. was accepted")
	}
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func TestDirStore(t *testing.T) {
	s, err := NewDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	storeContract(t, s)
	s.SetMaxBytes(32)
	err = s.Put(context.Background(), ObjectName("j", 20, 0, ir.Hash{9}), make([]byte, 64))
	if !errors.Is(err, ErrStoreFull) {
		t.Fatalf("over MaxBytes: %v", err)
	}
	t.Logf("a full store: %v", err)
}

func startNATS(t testing.TB) jetstream.JetStream {
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
	return js
}

func TestNATSStore(t *testing.T) {
	js := startNATS(t)
	ctx := context.Background()
	s, err := NewNATSStore(ctx, js, NATSConfig{})
	if err != nil {
		t.Fatal(err)
	}
	storeContract(t, s)

	// A planted corruption is caught by the digest in the name.
	m := tinyGPT2(t)
	l := layouts(t, m, 1, 0)[0]
	ts, _ := FromState(l, stateOf(l))
	data, d, err := Encode(&Shard{Step: 1, World: 1, Tensors: ts})
	if err != nil {
		t.Fatal(err)
	}
	name := ObjectName("j", 1, 0, d)
	if err := s.Put(ctx, name, data); err != nil {
		t.Fatal(err)
	}
	bad := slices.Clone(data)
	bad[len(bad)/3] ^= 0x80
	if err := s.Overwrite(ctx, name, bad); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Decode(got, d); !errors.Is(err, failure.CheckpointCorrupt) {
		t.Fatalf("a flipped byte in the store: %v", err)
	}

	// A bucket at its limit refuses with CHECKPOINT_STORE_FULL.
	small, err := NewNATSStore(ctx, js, NATSConfig{Bucket: "small", MaxBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	err = small.Put(ctx, ObjectName("j", 2, 0, ir.Hash{7}), make([]byte, 256<<10))
	if !errors.Is(err, ErrStoreFull) {
		t.Fatalf("a full bucket: %v", err)
	}
	t.Logf("a full bucket: %v", err)
}
