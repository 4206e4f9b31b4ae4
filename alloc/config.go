package alloc

import (
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"strings"
)

// RegionStrategy decides which regions an allocation tries, in which order,
// and when the pool grows.
type RegionStrategy int

const (
	// LoadBalancing (the default) acquires a new region for every
	// allocation while the pool may still grow, then tries the regions
	// with the most free bytes first. Allocations spread over many regions,
	// which keeps large free blocks around but spends the handle budget
	// early.
	LoadBalancing RegionStrategy = iota
	// FillFirst tries the regions with the fewest free bytes first (among
	// those with a free block big enough) and acquires a new region only
	// when no existing one can take the allocation. Allocations pack into
	// as few regions as possible, saving handles.
	FillFirst
)

func (s RegionStrategy) String() string {
	switch s {
	case LoadBalancing:
		return "load-balancing"
	case FillFirst:
		return "fill-first"
	}
	return fmt.Sprintf("RegionStrategy(%d)", int(s))
}

// BlockStrategy decides which free block of a region an allocation is
// carved from.
type BlockStrategy int

const (
	// FirstFit (the default) takes the lowest-offset free block that is
	// big enough.
	FirstFit BlockStrategy = iota
	// BestFit takes the smallest free block that is big enough (the
	// lowest-offset one among equals), leaving the smallest remainder.
	BestFit
)

func (s BlockStrategy) String() string {
	switch s {
	case FirstFit:
		return "first-fit"
	case BestFit:
		return "best-fit"
	}
	return fmt.Sprintf("BlockStrategy(%d)", int(s))
}

// Defaults used by DefaultConfig. The region sizes and alignment are
// WebGPU's default limits: maxStorageBufferBindingSize is 128 MiB and
// minStorageBufferOffsetAlignment is 256 bytes.
const (
	DefaultRegionSize = 128 << 20
	DefaultMaxRegions = 12
	DefaultAlignment  = 256
)

// Config configures an Allocator. Start from DefaultConfig; the zero
// Config is not valid.
type Config struct {
	// RegionSize is the preferred size of a new region, in bytes.
	RegionSize uint64
	// FallbackSizes are tried in order, after RegionSize, when the device
	// refuses a region. Each must be smaller than the one before it.
	FallbackSizes []uint64
	// MaxRegions is the handle budget: the most regions the allocator
	// will ever hold.
	MaxRegions int
	// Alignment of every block offset and the granule of every block
	// size: a power of two. New raises it to the device's
	// MinStorageBufferOffsetAlignment when that is larger.
	Alignment uint64
	// RegionStrategy picks regions; BlockStrategy picks blocks.
	RegionStrategy RegionStrategy
	BlockStrategy  BlockStrategy
	// Logger receives debug events (at slog.LevelDebug). When nil, the
	// allocator logs to standard error if TMMU_ALLOC_DEBUG=1 and not at
	// all otherwise.
	Logger *slog.Logger
}

// DefaultConfig returns 128 MiB regions falling back to 64 MiB and 32 MiB,
// a budget of 12 regions, 256-byte alignment, load-balancing regions and
// first-fit blocks.
func DefaultConfig() Config {
	return Config{
		RegionSize:     DefaultRegionSize,
		FallbackSizes:  []uint64{64 << 20, 32 << 20},
		MaxRegions:     DefaultMaxRegions,
		Alignment:      DefaultAlignment,
		RegionStrategy: LoadBalancing,
		BlockStrategy:  FirstFit,
	}
}

// ErrInvalidConfig is wrapped by every error Validate returns.
var ErrInvalidConfig = errors.New("alloc: invalid config")

// Validate reports every problem with c in one error wrapping
// ErrInvalidConfig, naming the offending fields and values. It cannot check
// c against a device's limits; New does that.
func (c Config) Validate() error {
	var bad []string
	if c.RegionSize == 0 {
		bad = append(bad, "RegionSize is 0, want > 0")
	}
	alignOK := c.Alignment != 0 && bits.OnesCount64(c.Alignment) == 1
	if !alignOK {
		bad = append(bad, fmt.Sprintf("Alignment %d is not a power of two", c.Alignment))
	}
	if alignOK && c.RegionSize != 0 && c.RegionSize < c.Alignment {
		bad = append(bad, fmt.Sprintf("RegionSize %d is smaller than Alignment %d", c.RegionSize, c.Alignment))
	}
	prev, prevName := c.RegionSize, "RegionSize"
	for i, s := range c.FallbackSizes {
		name := fmt.Sprintf("FallbackSizes[%d]", i)
		switch {
		case s == 0:
			bad = append(bad, fmt.Sprintf("%s is 0, want > 0", name))
		case s >= prev:
			bad = append(bad, fmt.Sprintf("%s %d is not smaller than %s %d", name, s, prevName, prev))
		case alignOK && s < c.Alignment:
			bad = append(bad, fmt.Sprintf("%s %d is smaller than Alignment %d", name, s, c.Alignment))
		}
		prev, prevName = s, name
	}
	if c.MaxRegions < 1 {
		bad = append(bad, fmt.Sprintf("MaxRegions %d, want >= 1", c.MaxRegions))
	}
	if c.RegionStrategy != LoadBalancing && c.RegionStrategy != FillFirst {
		bad = append(bad, fmt.Sprintf("RegionStrategy %d is unknown (want LoadBalancing or FillFirst)", int(c.RegionStrategy)))
	}
	if c.BlockStrategy != FirstFit && c.BlockStrategy != BestFit {
		bad = append(bad, fmt.Sprintf("BlockStrategy %d is unknown (want FirstFit or BestFit)", int(c.BlockStrategy)))
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, strings.Join(bad, "; "))
	}
	return nil
}
