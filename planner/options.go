package planner

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"

	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/planner/pack"
)

// Operator names used in failures (spec §0.G).
const (
	OpPlan     = "UML_OS.TMMU.PlanMemory_v2"
	OpLiveness = ir.OpLiveness
	OpSlots    = "UML_OS.TMMU.AssignLogicalSlots_v1"
	OpAddress  = "UML_OS.TMMU.MapToVirtualAddresses_v1"
	OpVerify   = "UML_OS.TMMU.VerifyPlan_v1"
)

// Mode selects which nodes a plan covers and how long tensors are kept.
type Mode string

// Modes. The spec's modes are forward, backward and inference; train_full is
// its preset for a whole training step.
const (
	// Inference runs forward nodes; nothing is kept for a backward pass.
	Inference Mode = "inference"
	// Forward runs forward nodes and keeps every tensor a later phase reads
	// (or that is marked saved_for_backward) alive to the end of the plan.
	Forward Mode = "forward"
	// Backward runs backward and optimizer nodes; tensors carried in from
	// the forward pass are live from the first position.
	Backward Mode = "backward"
	// TrainFull runs every node: forward, backward and optimizer.
	TrainFull Mode = "train_full"
)

// Modes lists the modes.
var Modes = []Mode{Inference, Forward, Backward, TrainFull}

// Phases returns the node phases a mode executes.
func (m Mode) Phases() []ir.Phase {
	switch m {
	case Inference, Forward:
		return []ir.Phase{ir.Forward}
	case Backward:
		return []ir.Phase{ir.Backward, ir.Optimizer}
	case TrainFull:
		return []ir.Phase{ir.Forward, ir.Backward, ir.Optimizer}
	}
	return nil
}

func (m Mode) selects(p ir.Phase) bool {
	switch p.Norm() {
	case ir.Forward:
		return m == Inference || m == Forward || m == TrainFull
	case ir.Backward, ir.Optimizer:
		return m == Backward || m == TrainFull
	}
	return false
}

// DefaultMode returns train_full when g has backward or optimizer nodes and
// inference otherwise.
func DefaultMode(g *ir.Graph) Mode {
	for i := range g.Nodes {
		if g.Nodes[i].Phase.Norm() != ir.Forward {
			return TrainFull
		}
	}
	return Inference
}

// Strategy names a placement strategy.
type Strategy string

// Strategies.
const (
	// Packed places every storage at its own byte offset, aiming at the
	// lower bound (see package pack): the default. Its logical slots are
	// the distinct offsets of an arena, numbered by offset.
	Packed Strategy = "packed"
	// Slots is the spec's strategy (AssignLogicalSlots_v1 +
	// MapToVirtualAddresses_v1): optimal slot count, each slot as large as
	// its largest tenant, slots laid out by prefix sum.
	Slots Strategy = "slots"
	// GreedySize is the classic baseline, kept for comparison: storages
	// largest first, each at the lowest offset where it fits (TensorFlow
	// Lite Micro's planner). Slots as for Packed.
	GreedySize Strategy = "greedy-size"
)

// Strategies lists the strategies that exist.
var Strategies = []Strategy{Packed, Slots, GreedySize}

// ArenaRole is the role of an arena (arena-roles-planner-api): scratch
// arenas are reused by liveness, persistent ones hold whole-step state,
// constant ones are read-only.
type ArenaRole string

// Arena roles.
const (
	Scratch         ArenaRole = "scratch"
	PersistentArena ArenaRole = "persistent"
	ConstantArena   ArenaRole = "constant"
)

// RoleOfArena returns the role of a named arena.
func RoleOfArena(name string) ArenaRole {
	switch name {
	case ir.ArenaParameters, ir.ArenaOptimizerState:
		return PersistentArena
	case ir.ArenaConstants:
		return ConstantArena
	}
	return Scratch
}

// DefaultAlignment is the arena alignment when none is configured (spec I.B).
const DefaultAlignment = 128

// ArenaSpec configures one arena (spec I.B arena_config).
type ArenaSpec struct {
	// CapacityBytes bounds the arena's reserved bytes; 0 means unbounded.
	CapacityBytes ByteSize `json:"capacity_bytes" cbor:"capacity_bytes"`
	// AlignmentBytes is the minimum alignment of every slot; a power of
	// two, 0 means DefaultAlignment.
	AlignmentBytes ByteSize `json:"alignment_bytes" cbor:"alignment_bytes"`
	// PageSize rounds the arena's reserved bytes up; a power of two, 0
	// means no rounding.
	PageSize ByteSize `json:"page_size" cbor:"page_size"`
	// RegionBytes, when not 0, is the size of the device buffers the
	// arena will be cut into (a multiple of AlignmentBytes): no storage
	// may cross a multiple of it, so every tensor lies inside one buffer
	// an executor can bind. A storage larger than it is refused
	// (ARENA_TOO_SMALL).
	RegionBytes ByteSize `json:"region_bytes,omitempty" cbor:"region_bytes,omitempty"`
}

// straddles reports whether [off, off+size) crosses a multiple of region
// (0 = no regions).
func straddles(off, size, region uint64) bool {
	return region != 0 && size > 0 && off/region != (off+size-1)/region
}

// ArenaConfig maps arena names to their configuration. Arenas that are not
// named get the defaults.
type ArenaConfig map[string]ArenaSpec

// Resolve returns the configuration of every arena with defaults filled
// in. It reports every problem at once: unknown arena names
// (INVALID_OPTIONS) and alignments or page sizes that are not powers of two
// (ALIGNMENT_VIOLATION; the first problem's code is the error's).
func (c ArenaConfig) Resolve() (ArenaConfig, error) {
	out := make(ArenaConfig, len(ir.Arenas))
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(c)) {
		if !slices.Contains(ir.Arenas, name) {
			errs = append(errs, failure.New(failure.InvalidOptions, OpPlan,
				fmt.Sprintf("arena_config names unknown arena %q (arenas: %s)", name, strings.Join(ir.Arenas, ", ")), "arena", name))
		}
	}
	for _, name := range ir.Arenas {
		s := c[name]
		if s.AlignmentBytes == 0 {
			s.AlignmentBytes = DefaultAlignment
		}
		if !ir.IsPow2(uint64(s.AlignmentBytes)) {
			errs = append(errs, failure.New(failure.AlignmentViolation, OpAddress,
				fmt.Sprintf("arena %s: alignment_bytes %d is not a power of two", name, s.AlignmentBytes), "arena", name))
		}
		if s.PageSize != 0 && !ir.IsPow2(uint64(s.PageSize)) {
			errs = append(errs, failure.New(failure.AlignmentViolation, OpAddress,
				fmt.Sprintf("arena %s: page_size %d is not a power of two", name, s.PageSize), "arena", name))
		}
		if r := uint64(s.RegionBytes); r != 0 && ir.IsPow2(uint64(s.AlignmentBytes)) && r%uint64(s.AlignmentBytes) != 0 {
			errs = append(errs, failure.New(failure.AlignmentViolation, OpAddress,
				fmt.Sprintf("arena %s: region_bytes %d is not a multiple of alignment_bytes %d", name, r, s.AlignmentBytes), "arena", name))
		}
		out[name] = s
	}
	if len(errs) == 1 {
		return nil, errs[0]
	}
	if len(errs) > 1 {
		first := *errs[0].(*failure.Error)
		first.Err = errors.Join(errs[1:]...)
		return nil, &first
	}
	return out, nil
}

// Hash returns arena_config_hash: SHA-256 over the canonical CBOR of the
// resolved configuration as [[name, capacity, alignment, page_size], ...]
// in name order, a row gaining a fifth element, region_bytes, when that
// is set (so configurations without regions hash as they always did).
// c must be resolved.
func (c ArenaConfig) Hash() ir.Hash {
	rows := make([][]any, 0, len(c))
	for _, name := range slices.Sorted(maps.Keys(c)) {
		s := c[name]
		row := []any{name, uint64(s.CapacityBytes), uint64(s.AlignmentBytes), uint64(s.PageSize)}
		if s.RegionBytes != 0 {
			row = append(row, uint64(s.RegionBytes))
		}
		rows = append(rows, row)
	}
	h, err := ir.Sum(rows)
	if err != nil {
		panic("planner: hashing arena config: " + err.Error()) // strings and uints always encode
	}
	return h
}

// Options are the planner inputs besides the graph (spec I.B).
type Options struct {
	Mode     Mode
	Strategy Strategy
	// Effort is the packed strategy's effort (pack.Fast when empty); the
	// other strategies ignore it.
	Effort pack.Effort
	// Budget overrides the effort's work budget when positive (see
	// pack.Options.Budget); the other strategies ignore it.
	Budget int64
	// ReplayToken is the 32-byte replay token (spec 0.B). It enters the
	// plan hash through the slot assignment table; layouts do not depend
	// on it.
	ReplayToken ir.Hash
	Arenas      ArenaConfig
	// Rank, WorldSize and ShardSpecHash place the plan in a sharded job
	// (spec II.I). Unsharded plans use rank 0, world size 1 and
	// NoShardSpecHash.
	Rank, WorldSize uint64
	ShardSpecHash   ir.Hash
	// PositionTimes optionally gives the time at which each executed
	// position starts, plus the time the last one ends (positions+1
	// values, strictly increasing). The packing strategies then weigh
	// lifetimes by these times rather than by positions in their
	// heuristics: offsets may change, validity never does. DSA instances
	// bring their own clock this way; nil means position k is time k.
	PositionTimes []int64
	// Spawn, when set, runs the function it is given on a goroutine of
	// the caller's, so that the packed strategy runs some of its steps
	// at once (see pack.Options.Spawn); the plan is byte-identical with
	// or without it. The planner starts no goroutine itself; a caller
	// that lends its goroutines passes Goroutines.
	Spawn func(func())
}

// Goroutines runs f on a goroutine of its own: the Spawn of a caller
// that lends the packer its goroutines (the daemons, the shells, the
// bench).
func Goroutines(f func()) { go f() }

// NoShardSpecHash is the shard_spec_hash of an unsharded plan:
// SHA-256(CBOR_CANONICAL(null)).
var NoShardSpecHash = func() ir.Hash {
	h, err := ir.Sum(nil)
	if err != nil {
		panic(err)
	}
	return h
}()

// DefaultOptions returns the options for an unsharded plan of g: the
// default mode for g, the packed strategy at fast effort, a zero replay
// token and default arenas.
func DefaultOptions(g *ir.Graph) Options {
	return Options{Mode: DefaultMode(g), Strategy: Packed, Effort: pack.Fast, WorldSize: 1, ShardSpecHash: NoShardSpecHash}
}

// normalize validates o and returns it with the arena config resolved.
func (o Options) normalize() (Options, error) {
	if !slices.Contains(Modes, o.Mode) {
		return o, failure.New(failure.InvalidOptions, OpPlan,
			fmt.Sprintf("unknown mode %q (modes: inference, forward, backward, train_full)", o.Mode), "mode", o.Mode)
	}
	if o.Strategy == "" {
		o.Strategy = Packed
	}
	if !slices.Contains(Strategies, o.Strategy) {
		return o, failure.New(failure.InvalidOptions, OpPlan,
			fmt.Sprintf("unknown strategy %q (strategies: %s)", o.Strategy, joinStrategies()), "strategy", o.Strategy)
	}
	if o.Strategy != Packed {
		o.Effort, o.Budget = "", 0
	} else if o.Effort == "" {
		o.Effort = pack.Fast
	} else if !slices.Contains(pack.Efforts, o.Effort) {
		return o, failure.New(failure.InvalidOptions, OpPlan,
			fmt.Sprintf("unknown effort %q (efforts: fast, exact)", o.Effort), "effort", o.Effort)
	}
	if o.Budget < 0 {
		return o, failure.New(failure.InvalidOptions, OpPlan,
			fmt.Sprintf("budget %d is negative (0 means the effort's default)", o.Budget), "budget", o.Budget)
	}
	if o.WorldSize == 0 {
		o.WorldSize = 1
	}
	if o.Rank >= o.WorldSize {
		return o, failure.New(failure.InvalidOptions, OpPlan,
			fmt.Sprintf("rank %d is not below world size %d", o.Rank, o.WorldSize), "rank", o.Rank, "world_size", o.WorldSize)
	}
	if o.ShardSpecHash.IsZero() {
		o.ShardSpecHash = NoShardSpecHash
	}
	var err error
	o.Arenas, err = o.Arenas.Resolve()
	return o, err
}

func joinStrategies() string {
	s := make([]string, len(Strategies))
	for i, x := range Strategies {
		s[i] = string(x)
	}
	return strings.Join(s, ", ")
}

// ByteSize is a byte count. In JSON it is a number or a string with a unit:
// "512", "64KiB", "80GiB", "1.5GB" (KiB, MiB, GiB, TiB are powers of 1024;
// KB, MB, GB, TB of 1000).
type ByteSize uint64

// UnmarshalJSON accepts a number or a string with a unit.
func (b *ByteSize) UnmarshalJSON(data []byte) error {
	var n uint64
	if err := json.Unmarshal(data, &n); err == nil {
		*b = ByteSize(n)
		return nil
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("byte size must be a non-negative integer or a string like \"80GiB\", got %s", data)
	}
	v, err := ParseByteSize(s)
	if err != nil {
		return err
	}
	*b = v
	return nil
}

var units = []struct {
	suffix string
	mult   uint64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1},
}

// ParseByteSize parses "1024", "64KiB", "1.5GB" and the like.
func ParseByteSize(s string) (ByteSize, error) {
	s = strings.TrimSpace(s)
	mult := uint64(1)
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	if n, err := strconv.ParseUint(s, 10, 64); err == nil {
		hi, lo := bits.Mul64(n, mult)
		if hi != 0 {
			return 0, fmt.Errorf("byte size %q overflows uint64", s)
		}
		return ByteSize(lo), nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || math.IsNaN(f) {
		return 0, fmt.Errorf("invalid byte size %q", s)
	}
	v := f * float64(mult)
	if v >= math.MaxUint64 || v != math.Trunc(v) {
		return 0, fmt.Errorf("byte size %q is not a whole number of bytes below 2^64", s)
	}
	return ByteSize(v), nil
}

// FormatBytes renders n with a binary unit: "512 B", "1.5 KiB", "2.00 GiB".
func FormatBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.2f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
