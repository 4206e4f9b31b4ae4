package worker

import (
	"fmt"
	"log/slog"

	"github.com/tmmu/tmmu/engine"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/planner"
	"github.com/tmmu/tmmu/runner"
	"github.com/tmmu/tmmu/transport"
)

// ExecutorNames are the executors a worker can run.
var ExecutorNames = []string{"auto", "webgpu", "cpu", "arena", "plan-only"}

// Executors returns the Config.Executor for name:
//
//   - "webgpu", "cpu": package engine trains the rank's view (forward,
//     backward, AdamW) in its planned arenas on that backend; ranks of a
//     data-parallel job exchange gradients and parameters over NATS
//     (transport.Group on the job's collective subject).
//   - "auto": webgpu when the machine has an adapter, else cpu (logged
//     as a warning); and when the engine cannot run the graph (bf16,
//     tensor or pipeline parallel views) the arena executor, logged too.
//   - "arena": memory traffic at the planned addresses, no arithmetic.
//   - "plan-only": no work.
func Executors(name string, tr *transport.Transport, job string, log *slog.Logger) (func(*ir.Graph, *planner.Plan) (runner.Executor, error), error) {
	switch name {
	case "arena":
		return func(g *ir.Graph, p *planner.Plan) (runner.Executor, error) {
			return runner.NewArenaExecutor(g, p, 1<<62)
		}, nil
	case "plan-only":
		return func(*ir.Graph, *planner.Plan) (runner.Executor, error) { return runner.PlanOnly{}, nil }, nil
	case "auto", "webgpu", "cpu":
	default:
		return nil, fmt.Errorf("executor %q: want one of %v", name, ExecutorNames)
	}
	o := engine.FactoryOptions{Backend: name, Log: log,
		Group: func(p *planner.Plan) (engine.Collectives, func() error, error) {
			g, err := tr.NewGroup(job, int(p.Rank), int(p.WorldSize), 0)
			if err != nil {
				return nil, nil, err
			}
			// A contribution NATS does not take (down, its bucket full
			// or gone) is retried until it does: logged at each doubling.
			g.OnRetry(func(key string, tries int, err error) {
				if tries&(tries-1) == 0 {
					log.Warn("retrying", "what", "storing a collective contribution", "key", key, "tries", tries, "err", err)
				}
			})
			return g, g.Close, nil
		}}
	if name == "auto" {
		o.Fallback = runner.Default
	}
	return engine.Factory(o), nil
}
