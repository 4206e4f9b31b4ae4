package models

import (
	"errors"
	"fmt"
	"strings"

	"github.com/tmmu/tmmu/ir"
)

// MaxLayers bounds the layer or block count of every generator, so that a
// mistyped config fails validation instead of exhausting memory.
const MaxLayers = 1 << 16

// MaxSyntheticTensors bounds SyntheticConfig.Tensors.
const MaxSyntheticTensors = 1 << 28

// problems collects a config's validation errors.
type problems struct {
	model string
	errs  []error
}

func (p *problems) addf(format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("models: %s: %s", p.model, fmt.Sprintf(format, args...)))
}

func (p *problems) positive(field string, v uint64) bool {
	if v == 0 {
		p.addf("%s %d must be positive", field, v)
		return false
	}
	return true
}

func (p *problems) layers(field string, v uint64) {
	if p.positive(field, v) && v > MaxLayers {
		p.addf("%s %d exceeds the limit %d", field, v, MaxLayers)
	}
}

func (p *problems) dtype(d ir.DType) {
	switch d {
	case ir.F32, ir.BF16, ir.F16:
	default:
		p.addf("dtype %q is not supported (want %s, %s or %s)", d, ir.F32, ir.BF16, ir.F16)
	}
}

// fits reports a tensor whose byte size, the product of dims, overflows
// uint64. names and dims pair up; zero dims are skipped (reported already).
func (p *problems) fits(names []string, dims ...uint64) {
	for _, d := range dims {
		if d == 0 {
			return
		}
	}
	if _, ok := ir.Numel(dims); !ok {
		parts := make([]string, len(dims))
		for i := range dims {
			parts[i] = fmt.Sprintf("%s %d", names[i], dims[i])
		}
		p.addf("tensor size %s overflows uint64", strings.Join(parts, " × "))
	}
}

func (p *problems) err() error { return errors.Join(p.errs...) }

// ChainConfig configures Chain: a stack of bias-free square matmuls.
type ChainConfig struct {
	Length uint64 // number of matmul layers
	Batch  uint64
	Hidden uint64
	DType  ir.DType // fp32, bf16 or fp16
	Train  bool     // forward + backward + AdamW; else forward only
}

// DefaultChainConfig returns 8 layers of [32,1024]·[1024,1024] in fp32.
func DefaultChainConfig() ChainConfig {
	return ChainConfig{Length: 8, Batch: 32, Hidden: 1024, DType: ir.F32}
}

// Validate reports every problem of c at once.
func (c ChainConfig) Validate() error {
	p := &problems{model: "chain"}
	p.layers("length", c.Length)
	p.positive("batch", c.Batch)
	p.positive("hidden", c.Hidden)
	p.dtype(c.DType)
	p.fits([]string{"batch", "hidden", "hidden", "bytes"}, c.Batch, c.Hidden, c.Hidden, 4)
	return p.err()
}

// ResidualConfig configures Residual: blocks of x + gelu(x·W).
type ResidualConfig struct {
	Blocks uint64
	Batch  uint64
	Hidden uint64
	DType  ir.DType
	Train  bool
}

// DefaultResidualConfig returns 8 blocks at batch 32, hidden 1024, fp32.
func DefaultResidualConfig() ResidualConfig {
	return ResidualConfig{Blocks: 8, Batch: 32, Hidden: 1024, DType: ir.F32}
}

// Validate reports every problem of c at once.
func (c ResidualConfig) Validate() error {
	p := &problems{model: "residual"}
	p.layers("blocks", c.Blocks)
	p.positive("batch", c.Batch)
	p.positive("hidden", c.Hidden)
	p.dtype(c.DType)
	p.fits([]string{"batch", "hidden", "hidden", "bytes"}, c.Batch, c.Hidden, c.Hidden, 4)
	return p.err()
}

// MLPConfig configures MLP: Layers linear layers In → Hidden → … → Classes
// with gelu between them.
type MLPConfig struct {
	Layers  uint64 // linear layers, ≥ 1
	Batch   uint64
	In      uint64
	Hidden  uint64
	Classes uint64
	DType   ir.DType
	Train   bool
}

// DefaultMLPConfig returns a 784 → 1024 → 1024 → 1024 → 10 MLP at batch 64,
// fp32.
func DefaultMLPConfig() MLPConfig {
	return MLPConfig{Layers: 4, Batch: 64, In: 784, Hidden: 1024, Classes: 10, DType: ir.F32}
}

// Validate reports every problem of c at once.
func (c MLPConfig) Validate() error {
	p := &problems{model: "mlp"}
	p.layers("layers", c.Layers)
	p.positive("batch", c.Batch)
	p.positive("in", c.In)
	p.positive("hidden", c.Hidden)
	p.positive("classes", c.Classes)
	p.dtype(c.DType)
	w := max(c.In, c.Hidden, c.Classes)
	p.fits([]string{"batch", "width", "width", "bytes"}, c.Batch, w, w, 4)
	return p.err()
}

// GPT2Config configures GPT2.
type GPT2Config struct {
	Layers  uint64
	Hidden  uint64
	Heads   uint64
	Seq     uint64 // tokens per sequence
	Context uint64 // rows of the positional embedding wpe (n_ctx), ≥ Seq
	Batch   uint64
	Vocab   uint64
	DType   ir.DType
	Train   bool
}

// DefaultGPT2Config returns GPT-2 small (124M parameters) at batch 1,
// sequence 1024, fp32.
func DefaultGPT2Config() GPT2Config {
	return GPT2Config{Layers: 12, Hidden: 768, Heads: 12, Seq: 1024, Context: 1024, Batch: 1, Vocab: 50257, DType: ir.F32}
}

// Validate reports every problem of c at once.
func (c GPT2Config) Validate() error {
	p := &problems{model: "gpt2"}
	p.layers("layers", c.Layers)
	p.positive("hidden", c.Hidden)
	if p.positive("heads", c.Heads) && c.Hidden%c.Heads != 0 {
		p.addf("hidden %d is not divisible by heads %d", c.Hidden, c.Heads)
	}
	p.positive("seq", c.Seq)
	if p.positive("context", c.Context) && c.Seq > c.Context {
		p.addf("seq %d exceeds context %d (the rows of wpe)", c.Seq, c.Context)
	}
	p.positive("batch", c.Batch)
	p.positive("vocab", c.Vocab)
	p.dtype(c.DType)
	p.fits([]string{"batch", "seq", "vocab", "bytes"}, c.Batch, c.Seq, c.Vocab, 4)
	p.fits([]string{"batch", "seq", "4×hidden", "bytes"}, c.Batch, c.Seq, c.Hidden, 16)
	p.fits([]string{"vocab", "hidden", "bytes"}, c.Vocab, c.Hidden, 4)
	p.fits([]string{"context", "hidden", "bytes"}, c.Context, c.Hidden, 4)
	p.fits([]string{"hidden", "4×hidden", "bytes"}, c.Hidden, c.Hidden, 16)
	return p.err()
}

// LlamaConfig configures Llama.
type LlamaConfig struct {
	Layers       uint64
	Hidden       uint64
	Heads        uint64
	KVHeads      uint64 // key/value heads; < Heads for grouped-query attention
	Intermediate uint64 // SwiGLU width
	Vocab        uint64
	Seq          uint64
	Batch        uint64
	DType        ir.DType
	Train        bool
}

// DefaultLlamaConfig returns Llama-2-7B at batch 1, sequence 2048, bf16.
func DefaultLlamaConfig() LlamaConfig {
	return LlamaConfig{Layers: 32, Hidden: 4096, Heads: 32, KVHeads: 32, Intermediate: 11008, Vocab: 32000, Seq: 2048, Batch: 1, DType: ir.BF16}
}

// Validate reports every problem of c at once.
func (c LlamaConfig) Validate() error {
	p := &problems{model: "llama"}
	p.layers("layers", c.Layers)
	p.positive("hidden", c.Hidden)
	if p.positive("heads", c.Heads) && c.Hidden != 0 {
		switch {
		case c.Hidden%c.Heads != 0:
			p.addf("hidden %d is not divisible by heads %d", c.Hidden, c.Heads)
		case (c.Hidden/c.Heads)%2 != 0:
			p.addf("head dimension hidden/heads = %d/%d = %d is odd; rope needs an even head dimension", c.Hidden, c.Heads, c.Hidden/c.Heads)
		}
	}
	if p.positive("kv_heads", c.KVHeads) && c.Heads != 0 {
		if c.KVHeads > c.Heads {
			p.addf("kv_heads %d exceeds heads %d", c.KVHeads, c.Heads)
		} else if c.Heads%c.KVHeads != 0 {
			p.addf("heads %d is not divisible by kv_heads %d", c.Heads, c.KVHeads)
		}
	}
	p.positive("intermediate", c.Intermediate)
	p.positive("vocab", c.Vocab)
	p.positive("seq", c.Seq)
	p.positive("batch", c.Batch)
	p.dtype(c.DType)
	p.fits([]string{"batch", "seq", "vocab", "bytes"}, c.Batch, c.Seq, c.Vocab, 4)
	p.fits([]string{"batch", "seq", "intermediate", "bytes"}, c.Batch, c.Seq, c.Intermediate, 4)
	p.fits([]string{"batch", "seq", "hidden", "bytes"}, c.Batch, c.Seq, c.Hidden, 4)
	p.fits([]string{"vocab", "hidden", "bytes"}, c.Vocab, c.Hidden, 4)
	p.fits([]string{"hidden", "intermediate", "bytes"}, c.Hidden, c.Intermediate, 4)
	return p.err()
}

// SyntheticConfig configures Synthetic.
type SyntheticConfig struct {
	Tensors uint64 // total tensors, ≥ 3
	Seed    uint64 // PCG seed
	Window  uint64 // a node reads among the last Window activations
	// Train must be false: synthetic graphs are inference only. The field
	// exists so that a uniform driver gets a clear error.
	Train bool
}

// DefaultSyntheticConfig returns a 1,000,000-tensor graph, seed 0, window 64.
func DefaultSyntheticConfig() SyntheticConfig {
	return SyntheticConfig{Tensors: 1_000_000, Window: 64}
}

// Validate reports every problem of c at once.
func (c SyntheticConfig) Validate() error {
	p := &problems{model: "synthetic"}
	switch {
	case c.Tensors < 3:
		p.addf("tensors %d is below the minimum 3 (an input, a parameter and an activation)", c.Tensors)
	case c.Tensors > MaxSyntheticTensors:
		p.addf("tensors %d exceeds the limit %d", c.Tensors, MaxSyntheticTensors)
	}
	p.positive("window", c.Window)
	if c.Train {
		p.addf("train true is not supported (synthetic graphs are inference only)")
	}
	return p.err()
}
