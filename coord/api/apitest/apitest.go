// Package apitest builds and describes jobs for the scenario tests of
// the coordinator's and the workers' decisions.
package apitest

import (
	"fmt"

	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/shard"
)

// Planned is epoch e of a world of n ranks from step start, planned: made-
// up plan hashes, one per rank.
func Planned(e, start, n uint64) *api.Epoch {
	ep := &api.Epoch{Epoch: e, StartStep: start, GlobalPlanHash: ir.Hash{byte(e + 1)}}
	for r := range n {
		ep.Expected = append(ep.Expected, ir.Hash{byte(e + 1), byte(r)})
	}
	return ep
}

// World is the shard spec of n ranks in tensor-parallel groups of tp,
// data parallel across them.
func World(n, tp uint64) shard.Spec {
	return shard.Spec{WorldSize: n, DataParallel: shard.DataParallel{Degree: n / tp}, TensorParallel: shard.TensorParallel{Degree: tp}}
}

// Describe is one line on job j: status, current epoch, world, progress
// and last checkpoint.
func Describe(j *api.Job) string {
	e := j.Current()
	spec, members := j.World(e.Epoch)
	s := fmt.Sprintf("%s: epoch %d from step %d, world %d", j.Status, e.Epoch, e.StartStep, spec.WorldSize)
	if members != nil {
		s += fmt.Sprintf(" %v", members)
	}
	s += fmt.Sprintf(", progress %d", j.LastStep)
	if k := j.LastCheckpoint(); k != nil {
		s += fmt.Sprintf(", checkpoint %d", k.Step)
	}
	if j.Paused != "" {
		s += fmt.Sprintf(", paused at %d (%s)", j.PausedAt, j.Paused)
	}
	return s
}
