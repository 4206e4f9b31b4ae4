package worker_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/data"
	"github.com/tmmu/tmmu/datastore"
	"github.com/tmmu/tmmu/engine"
	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/models"
	"github.com/tmmu/tmmu/planner"
	"github.com/tmmu/tmmu/safetensors"
	"github.com/tmmu/tmmu/transport"
	"github.com/tmmu/tmmu/weights"
	"github.com/tmmu/tmmu/worker"
)

// learnable returns n uint16 tokens below vocab with structure a model
// learns (each token has a few likely successors).
func learnable(n, vocab int, seed uint64) []byte {
	b := make([]byte, 2*n)
	x, tok := seed, 0
	for i := range n {
		x = x*6364136223846793005 + 1442695040888963407
		r := int(x >> 33)
		if r%8 == 0 {
			tok = r % vocab
		} else {
			tok = (tok*5 + 1 + r%3) % vocab
		}
		binary.LittleEndian.PutUint16(b[2*i:], uint16(tok))
	}
	return b
}

// put stores files as a named dataset through the coordinators' API.
func put(t *testing.T, ctx context.Context, cl *api.Client, name, format string, files ...[]byte) *datastore.Entry {
	t.Helper()
	var refs []datastore.FileRef
	for i, f := range files {
		ref, err := cl.PutFile(ctx, fmt.Sprintf("%s.%d", name, i), bytes.NewReader(f), int64(len(f)))
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, ref)
	}
	e, err := cl.CommitDataset(ctx, name, datastore.Request{Format: format, Files: refs})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestWorkersTrainOnData trains a GPT-2 over 2 ranks (ZeRO-3, over
// NATS, a secured cluster: the workers only read the data store) on a
// dataset stored in the cluster, from stored initial weights, with
// validation, and compares it with one engine training the same model
// on the whole global batch in one process: every step's mean loss over
// the ranks and every validation loss equal the single run's.
func TestWorkersTrainOnData(t *testing.T) {
	l, ctx := startLocal(t)
	cl := l.Client()
	const steps, world, vocab = 6, 2, 64
	cfg := models.GPT2Config{Layers: 1, Hidden: 32, Heads: 2, Seq: 16, Context: 16, Batch: 2, Vocab: vocab, DType: ir.F32, Train: true}
	m, err := models.GPT2(cfg)
	if err != nil {
		t.Fatal(err)
	}
	g, _ := ir.Compile(m)
	trainBytes, valBytes := learnable(5000, vocab, 1), learnable(1000, vocab, 2)
	put(t, ctx, cl, "toks", "uint16", trainBytes[:4000], trainBytes[4000:])
	put(t, ctx, cl, "toks-val", "uint16", valBytes)
	// Initial weights: DefaultInit scaled, so they differ from what an
	// executor would start from without them.
	var ts []safetensors.Tensor
	init := map[string][]float32{}
	naming := weights.NamingOf(g)
	for _, id := range naming.Params() {
		ti, _ := g.TensorIndex(id)
		n, _ := ir.Numel(g.Tensors[ti].Shape)
		v := make([]float32, n)
		for i := range v {
			v[i] = 1.5*engine.DefaultInit(id, g.Tensors[ti].Shape, uint64(i)) + 0.01
		}
		init[id] = v
		ts = append(ts, safetensors.F32Tensor(naming.Names[id], g.Tensors[ti].Shape, v))
	}
	var wb bytes.Buffer
	safetensors.Write(&wb, ts, nil)
	put(t, ctx, cl, "w0", "safetensors", wb.Bytes())

	irJSON, _ := json.Marshal(m)
	opt := api.Optimizer{Name: "adamw", LR: "0.003", Beta1: "0.9", Beta2: "0.99", Eps: "1e-08", WeightDecay: "0.05"}
	j, err := cl.Submit(ctx, &api.SubmitRequest{Name: "data", IR: irJSON, Steps: steps, Seed: 7,
		ShardSpec:   json.RawMessage(fmt.Sprintf(`{"world_size": %d, "data_parallel": {"zero_stage": 3}}`, world)),
		ArenaConfig: engine.ExecutableArenas(engine.PortableLimits, nil),
		Data:        &api.DataSpec{Train: api.DataRef{Name: "toks"}, Val: &api.DataRef{Name: "toks-val"}, Order: "shuffled", ValEvery: 3, ValBatches: 2},
		Weights:     &api.DataRef{Name: "w0"}, Optimizer: &opt})
	if err != nil {
		t.Fatal(err)
	}
	if j.Spec.Data.Train.Manifest.IsZero() || j.Spec.Data.Train.MaxToken != vocab-1 || j.Spec.Weights.Kind != datastore.KindWeights {
		t.Fatalf("the submission did not pin its data: %+v", j.Spec.Data.Train)
	}
	results := make([]worker.Result, world)
	var wg sync.WaitGroup
	for i := range world {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := l.RunWorker(ctx, worker.Config{Identity: fmt.Sprint("d-w", i), Job: "data", ExecutorName: "cpu", Poll: 20 * time.Millisecond}, 5)
			if err != nil {
				t.Errorf("w%d: %v", i, err)
			}
			results[res.Rank] = res
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	// Each rank fetched, in range reads from the coordinators, the rows
	// it fed and no more: S+1 tokens a row of S (the labels are the
	// tokens shifted by one).
	for _, r := range results {
		if r.DataFed == 0 || r.DataFetched*cfg.Seq != r.DataFed*(cfg.Seq+1) {
			t.Errorf("rank %d fed %d bytes of tokens and fetched %d, want %d", r.Rank, r.DataFed, r.DataFetched, r.DataFed*(cfg.Seq+1)/cfg.Seq)
		}
	}

	// The reference: one engine, the whole global batch.
	ref := cfg
	ref.Batch = cfg.Batch * world
	rm, _ := models.GPT2(ref)
	rg, _ := ir.Compile(rm)
	opts := planner.DefaultOptions(rg)
	opts.Arenas = engine.ExecutableArenas(engine.PortableLimits, nil)
	p, err := planner.PlanMemory(rg, opts)
	if err != nil {
		t.Fatal(err)
	}
	x, err := engine.NewExecutor(rg, p, engine.Options{Backend: engine.NewCPU(), Weights: init,
		AdamW: engine.AdamW{LR: 0.003, Beta1: 0.9, Beta2: 0.99, Eps: 1e-8, WeightDecay: 0.05}}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	open := func(b []byte, parts int) *data.Dataset {
		var srcs []data.Source
		cut := len(b)
		if parts == 2 {
			cut = 4000
		}
		srcs = append(srcs, memSource(b[:cut]))
		if parts == 2 {
			srcs = append(srcs, memSource(b[cut:]))
		}
		d, err := data.Open(data.Uint16, srcs, nil)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	td, vd := open(trainBytes, 2), open(valBytes, 1)
	tsum, _ := td.Scan(0)
	vsum, _ := vd.Scan(0)
	train, _ := data.NewStream(td, data.Shuffled, 7, tsum.Digest, cfg.Seq, ref.Batch)
	val, _ := data.NewStream(vd, data.Sequential, 7, vsum.Digest, cfg.Seq, ref.Batch)
	if err := x.SetData(engine.Data{Train: train, Val: val, ValBatches: 2}); err != nil {
		t.Fatal(err)
	}
	for s := uint64(1); s <= steps; s++ {
		st, err := x.Step(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		mean := 0.0
		for _, r := range results {
			if len(r.Losses) != steps {
				t.Fatalf("rank %d ran %d steps", r.Rank, len(r.Losses))
			}
			mean += r.Losses[s-1] / world
		}
		if d := math.Abs(mean-st.Loss) / st.Loss; d > 1e-5 {
			t.Errorf("step %d: the ranks' mean loss %.7f, one engine %.7f (relative %.2g)", s, mean, st.Loss, d)
		}
		if s%3 == 0 {
			v, ok, err := x.Validate(ctx, s)
			if err != nil || !ok {
				t.Fatal(err)
			}
			mv := 0.0
			for _, r := range results {
				var got *worker.Validation
				for i := range r.Validations {
					if r.Validations[i].Step == s {
						got = &r.Validations[i]
					}
				}
				if got == nil {
					t.Fatalf("rank %d did not validate after step %d: %v", r.Rank, s, r.Validations)
				}
				mv += got.Loss / world
			}
			if d := math.Abs(mv-v) / v; d > 1e-5 {
				t.Errorf("validation after step %d: the ranks' mean %.7f, one engine %.7f", s, mv, v)
			}
			t.Logf("step %d: loss %.5f (ranks' mean %.5f), validation %.5f (ranks' mean %.5f)", s, st.Loss, mean, v, mv)
		}
	}
	if results[0].Losses[steps-1] >= results[0].Losses[0] {
		t.Errorf("the loss did not fall: %v", results[0].Losses)
	}

	// A submission whose tokens do not fit the model is refused before
	// anything is committed, naming the dataset.
	small := cfg
	small.Vocab = 32
	sm, _ := models.GPT2(small)
	smJSON, _ := json.Marshal(sm)
	_, err = cl.Submit(ctx, &api.SubmitRequest{Name: "too-small", IR: smJSON, Steps: 1, ShardSpec: json.RawMessage(`{"world_size": 1}`),
		Data: &api.DataSpec{Train: api.DataRef{Name: "toks"}}})
	if !errors.Is(err, failure.InvalidDataset) || !strings.Contains(err.Error(), "token id 63") {
		t.Errorf("vocabulary 32 on tokens up to 63: %v", err)
	}
	_, err = cl.Submit(ctx, &api.SubmitRequest{Name: "no-such", IR: irJSON, Steps: 1, ShardSpec: json.RawMessage(`{"world_size": 1}`),
		Data: &api.DataSpec{Train: api.DataRef{Name: "nope"}}})
	if !errors.Is(err, failure.InvalidDataset) || !strings.Contains(err.Error(), `no dataset named "nope"`) {
		t.Errorf("an unknown dataset: %v", err)
	}
	_, err = cl.Submit(ctx, &api.SubmitRequest{Name: "bad-weights", IR: smJSON, Steps: 1, ShardSpec: json.RawMessage(`{"world_size": 1}`),
		Weights: &api.DataRef{Name: "w0"}})
	if !errors.Is(err, failure.InvalidWeights) || !strings.Contains(err.Error(), "transformer.wte.weight is [64 32], the graph's wte is [32 32]") {
		t.Errorf("weights of another vocabulary: %v", err)
	}
	if _, err := cl.Job(ctx, "too-small"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("a refused submission was committed: %v", err)
	}
	// The range reads the workers make: bad ones are refused by name,
	// and only with a token.
	md := j.Spec.Data.Train.Manifest
	if b, err := cl.ReadFile(ctx, md, 1, 10, 6); err != nil || !bytes.Equal(b, trainBytes[4010:4016]) {
		t.Errorf("a range read of the second file: %v %v", b, err)
	}
	for _, c := range []struct {
		d      ir.Hash
		i      int
		off, n uint64
		want   string
	}{
		{md, 2, 0, 1, "has 2 files, no file 2"},
		{md, 0, 0, datastore.MaxRead + 1, "INVALID_OPTIONS"},
		{md, 0, 1 << 40, 1, "past the end"},
		{ir.Hash{1}, 0, 0, 1, "no manifest"},
	} {
		if _, err := cl.ReadFile(ctx, c.d, c.i, c.off, c.n); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("read %s file %d [%d,+%d): %v, want %q", c.d.Short(), c.i, c.off, c.n, err, c.want)
		}
	}
	anon := *cl
	anon.Token = ""
	if _, err := anon.ReadFile(ctx, md, 0, 0, 1); err == nil || !strings.Contains(err.Error(), "read token") {
		t.Errorf("a range read without a token: %v", err)
	}
	if m, err := cl.Manifest(ctx, md); err != nil || m.Name != "toks" {
		t.Errorf("manifest: %v %v", m, err)
	}

	// Removing a dataset a finished job read collects its blocks.
	rm2, err := cl.RemoveDataset(ctx, "toks", false)
	if err != nil || rm2.Objects == 0 {
		t.Errorf("remove: %+v %v", rm2, err)
	}
	if transport.DataStream != "OBJ_"+datastore.Bucket {
		t.Errorf("workers may not read %s, the data store is %s", transport.DataStream, datastore.Bucket)
	}
}

type memSrc struct{ *bytes.Reader }

func (memSrc) Name() string { return "mem" }

func memSource(b []byte) data.Source { return memSrc{bytes.NewReader(b)} }
