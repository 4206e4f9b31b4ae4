package transport

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/tmmu/tmmu/ir"
)

// AddResult says what Tally.Add did with a report.
type AddResult uint8

// The results of Add. Only Accepted changes the state.
const (
	// Accepted: the first report of its rank; recorded whether or not
	// its hash is the expected one.
	Accepted AddResult = iota + 1
	// Duplicate: the rank already reported the same hash; ignored.
	Duplicate
	// Conflicting: the rank already reported a different hash; ignored,
	// the first report stands.
	Conflicting
	// OtherEpoch: the report is for another job or another epoch (a late
	// message from an older epoch, an early one from a newer); ignored.
	OtherEpoch
	// BadRank: the rank is not below the world size; ignored.
	BadRank
	// Invalid: the report fails Validate (a zero plan hash, say); ignored.
	Invalid
	// IdentityTaken: the report's identity already stands for another
	// rank of the epoch (one credential speaks for one rank); ignored.
	IdentityTaken
)

var addResultNames = [...]string{
	Accepted:      "accepted",
	Duplicate:     "duplicate",
	Conflicting:   "conflicting",
	OtherEpoch:    "other-epoch",
	BadRank:       "bad-rank",
	Invalid:       "invalid",
	IdentityTaken: "identity-taken",
}

func (a AddResult) String() string {
	if int(a) < len(addResultNames) && addResultNames[a] != "" {
		return addResultNames[a]
	}
	return "AddResult(" + strconv.Itoa(int(a)) + ")"
}

// Tally collects reports for one (job, epoch) against the expected hashes.
// It is pure and deterministic (no I/O, no clock): the coordinator leader
// feeds it the reports it watches and asks for the Outcome when it is Done
// or when its deadline passes. The first report of each rank counts; the
// Outcome depends only on the set of first reports, not on their order or
// on duplicates. A Tally is not safe for concurrent use.
type Tally struct {
	job      string
	epoch    uint64
	expected []ir.Hash
	got      []ir.Hash // zero: not reported (reports never carry a zero hash)
	holders  []string  // by rank, the identity whose report counts
	ranks    map[string]uint64
	reported uint64
	bad      uint64 // ranks whose first report is not the expected hash
}

// NewTally returns a Tally for (job, epoch) where rank r must report
// expected[r]; the world size is len(expected). The slice is copied.
func NewTally(job string, epoch uint64, expected []ir.Hash) *Tally {
	return &Tally{
		job:      job,
		epoch:    epoch,
		expected: slices.Clone(expected),
		got:      make([]ir.Hash, len(expected)),
		holders:  make([]string, len(expected)),
		ranks:    map[string]uint64{},
	}
}

// Add records a report. Reports for another job or epoch (late messages
// from older epochs, or early ones), duplicates (same rank again, same
// hash), invalid reports and ranks out of range are ignored and reported as
// such via the returned AddResult; so is a Conflicting report (same rank,
// different hash than its first report: the first one stands) and one
// whose identity already stands for another rank (IdentityTaken).
//
// Add does not check that the identity holds the rank: the leader feeds
// it only reports whose identity held the rank's claim at the revision
// they name.
func (t *Tally) Add(r PlanReport) AddResult {
	if r.Job != t.job || r.Epoch != t.epoch {
		return OtherEpoch
	}
	if r.Rank >= uint64(len(t.expected)) {
		return BadRank
	}
	if r.Validate() != nil {
		return Invalid
	}
	if rank, ok := t.ranks[r.Identity]; ok && rank != r.Rank {
		return IdentityTaken
	}
	switch g := t.got[r.Rank]; {
	case g.IsZero():
		t.got[r.Rank] = r.PlanHash
		t.holders[r.Rank] = r.Identity
		t.ranks[r.Identity] = r.Rank
		t.reported++
		if r.PlanHash != t.expected[r.Rank] {
			t.bad++
		}
		return Accepted
	case g == r.PlanHash:
		return Duplicate
	default:
		return Conflicting
	}
}

// World returns the number of ranks.
func (t *Tally) World() uint64 { return uint64(len(t.expected)) }

// Reported returns how many ranks have reported.
func (t *Tally) Reported() uint64 { return t.reported }

// Done reports whether every rank has reported (whatever the hashes).
func (t *Tally) Done() bool { return t.reported == uint64(len(t.expected)) }

// Outcome returns the outcome so far: Agreed iff every rank reported its
// expected hash (and there is at least one rank); Mismatches, sorted by
// rank, the ranks whose first report differs from the expected hash;
// Missing, sorted, the ranks that never reported. It can be called at any
// time, e.g. when a deadline passes (then Missing is non-empty and Agreed
// false). StartStep is left zero: the leader sets it before publishing.
// Empty lists are nil, so equal outcomes encode to equal bytes. Holders
// names, by rank, the identity whose report counted ("" for a missing
// rank).
func (t *Tally) Outcome() Outcome {
	o := Outcome{Job: t.job, Epoch: t.epoch}
	world := uint64(len(t.expected))
	if world == 0 {
		o.Reason = "no ranks"
		return o
	}
	if t.bad > 0 {
		o.Mismatches = make([]Mismatch, 0, t.bad)
	}
	if missing := world - t.reported; missing > 0 {
		o.Missing = make([]uint64, 0, missing)
	}
	for r, g := range t.got {
		switch {
		case g.IsZero():
			o.Missing = append(o.Missing, uint64(r))
		case g != t.expected[r]:
			o.Mismatches = append(o.Mismatches, Mismatch{Rank: uint64(r), Expected: t.expected[r], Got: g})
		}
	}
	o.Agreed = len(o.Mismatches) == 0 && len(o.Missing) == 0
	o.Holders = slices.Clone(t.holders)
	if !o.Agreed {
		o.Reason = disagreement(uint64(len(o.Mismatches)), uint64(len(o.Missing)), world)
	}
	return o
}

func disagreement(mismatched, missing, world uint64) string {
	switch {
	case mismatched > 0 && missing > 0:
		return fmt.Sprintf("%d of %d ranks reported an unexpected plan hash; %d did not report", mismatched, world, missing)
	case mismatched > 0:
		return fmt.Sprintf("%d of %d ranks reported an unexpected plan hash", mismatched, world)
	default:
		return fmt.Sprintf("%d of %d ranks did not report", missing, world)
	}
}
