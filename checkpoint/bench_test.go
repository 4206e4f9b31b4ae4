package checkpoint

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/models"
)

// BenchmarkStore times one rank's checkpoint write (export to a shard,
// encode, SHA-256, store) and restore (read, verify the digest, decode,
// recut) on loopback JetStream (file storage), for rank 0 of 4 under
// ZeRO-3: the demo's model and GPT-2 small (124M parameters; parameters,
// AdamW's m and v). MB/s is over the shard's bytes.
//
//	go test ./checkpoint -run '^$' -bench Store -benchtime 3x
func BenchmarkStore(b *testing.B) {
	for _, c := range []struct {
		name string
		cfg  models.GPT2Config
	}{
		{"demo", models.GPT2Config{Layers: 2, Hidden: 64, Heads: 4, Seq: 32, Context: 32, Batch: 1, Vocab: 64, DType: ir.F32, Train: true}},
		{"gpt2-small", models.GPT2Config{Layers: 12, Hidden: 768, Heads: 12, Seq: 64, Context: 1024, Batch: 1, Vocab: 50257, DType: ir.F32, Train: true}},
	} {
		m, err := models.GPT2(c.cfg)
		if err != nil {
			b.Fatal(err)
		}
		layout := layouts(b, m, 4, 3)[0]
		state := stateOf(layout)
		tensors, err := FromState(layout, state)
		if err != nil {
			b.Fatal(err)
		}
		shard := &Shard{Step: 50, World: 4, OptimizerStep: 51, Tensors: tensors}
		data, digest, err := Encode(shard)
		if err != nil {
			b.Fatal(err)
		}
		js := startNATS(b)
		st, err := NewNATSStore(context.Background(), js, NATSConfig{Storage: jetstream.FileStorage})
		if err != nil {
			b.Fatal(err)
		}
		name := ObjectName("bench", 50, 0, digest)
		b.Run(c.name+"/write", func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			i := 0
			for b.Loop() {
				ts, err := FromState(layout, state)
				if err != nil {
					b.Fatal(err)
				}
				s := &Shard{Step: uint64(100 + i), World: 4, OptimizerStep: 51, Tensors: ts}
				d, h, err := Encode(s)
				if err != nil {
					b.Fatal(err)
				}
				if err := st.Put(context.Background(), ObjectName("bench", s.Step, 0, h), d); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
		if err := st.Put(context.Background(), name, data); err != nil {
			b.Fatal(err)
		}
		b.Run(c.name+"/restore", func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				got, err := st.Get(context.Background(), name)
				if err != nil {
					b.Fatal(err)
				}
				s, err := Decode(got, digest)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := Recut([]*Shard{s}, layout); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Logf("%s: rank 0 of 4 (ZeRO-3) holds %d tensors, a %s shard", c.name, len(layout), fmt.Sprintf("%.1f MB", float64(len(data))/1e6))
	}
}
