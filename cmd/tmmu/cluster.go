package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/engine"
	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/internal/cli"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/planner"
	"github.com/tmmu/tmmu/replan"
	"github.com/tmmu/tmmu/trust"
)

var jobCmd = &command{
	name:    "job",
	summary: "Submit jobs to a coordinator cluster, list them, show a job's epochs and checkpoints, export a checkpoint's weights as safetensors, cancel or delete a job.",
	usage: "job submit IR|--source FILE --shard-spec SPEC --name NAME [--steps N] [--mode M] [--strategy S] [--arena-config FILE] [--replan-policy P] [--data-mode M]\n" +
		"           [--checkpoint-every N] [--checkpoint-keep K] [--seed S] [--elastic]\n" +
		"           [--data NAME|file:///PATH[,...] [--data-format F] [--order shuffled|sequential] [--val-data NAME|file:///PATH [--val-every N] [--val-batches N]]]\n" +
		"           [--weights NAME|FILE|file:///PATH] [--lr X] [--beta1 X] [--beta2 X] [--eps X] [--weight-decay X] [cluster flags] [-o text|json]\n" +
		"       tmmu job export NAME --out FILE.safetensors [--step N] [--with-optimizer] [cluster flags]\n" +
		"       tmmu job list [cluster flags] [-o text|json]\n" +
		"       tmmu job history NAME [cluster flags] [-o text|json]\n" +
		"       tmmu job cancel NAME [--reason TEXT] [cluster flags] [-o text|json]\n" +
		"       tmmu job delete NAME [cluster flags]",
	run: runJob,
}

var statusCmd = &command{
	name:    "status",
	summary: "Show a coordinator cluster: leader, term, voters, and per job its epoch, agreement, missing ranks and last step.",
	usage:   "status [cluster flags] [-o text|json]",
	run:     runStatus,
}

// clusterFlags are the settings every cluster command shares. Flags win
// over TMMU_* environment variables (TMMU_COORDINATORS), which win over the
// config file (--config, or TMMU_CONFIG: {"coordinators": ["http://…"]}).
type clusterFlags struct {
	coordinators *string
	config       *string
	timeout      *time.Duration
	token        *string
	tokenFile    *string
	caFile       *string
}

func addClusterFlags(fs *flag.FlagSet) clusterFlags {
	return clusterFlags{
		coordinators: fs.String("coordinators", "", "coordinator HTTP URLs, comma-separated (default http://127.0.0.1:8080)"),
		config:       fs.String("config", "", "JSON config file: {\"coordinators\": [\"http://host:port\", ...]}"),
		timeout:      fs.Duration("timeout", 30*time.Second, "give up after this long"),
		token:        fs.String("token", "", "the coordinators' API token (or, for reads, the read token) (TMMU_TOKEN)"),
		tokenFile:    fs.String("token-file", "", "read the API token from this file (TMMU_TOKEN_FILE)"),
		caFile:       fs.String("ca-file", "", "the cluster's CA certificate, for https coordinators (TMMU_CA_FILE; tmmu secrets init writes ca.crt)"),
	}
}

// fileConfig is the config file.
type fileConfig struct {
	Coordinators []string `json:"coordinators"`
}

// emit writes v as JSON (format "json") or with text.
func emit(e *env, format string, v any, text func(io.Writer)) error {
	if format == "json" {
		return writeJSON(e.stdout, v)
	}
	text(e.stdout)
	return nil
}

// parse parses a cluster command's flags (with out its -o, text or json)
// and returns the positional arguments and a client for the cluster.
func (c clusterFlags) parse(e *env, fs *flag.FlagSet, out *string, args []string) ([]string, *api.Client, error) {
	pos, err := parse(fs, args)
	if err != nil {
		return nil, nil, err
	}
	if err := outputFormat(e, *out, "text", "json"); err != nil {
		return nil, nil, err
	}
	cl, err := c.client(e, fs)
	return pos, cl, err
}

func (c clusterFlags) client(e *env, fs *flag.FlagSet) (*api.Client, error) {
	if err := cli.ApplyEnv(fs); err != nil {
		return nil, usagef("%v", err)
	}
	urls := *c.coordinators
	if urls == "" && *c.config != "" {
		data, err := readInput(e, *c.config)
		if err != nil {
			return nil, err
		}
		var fc fileConfig
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&fc); err != nil {
			return nil, failure.New(failure.InvalidEncoding, opIO, fmt.Sprintf("config %s: %v", *c.config, err), "file", *c.config)
		}
		urls = strings.Join(fc.Coordinators, ",")
	}
	if urls == "" {
		urls = "http://127.0.0.1:8080"
	}
	cl := api.NewClient(strings.Split(urls, ",")...)
	cl.Token = *c.token
	if *c.tokenFile != "" {
		tok, err := cli.ReadSecret(*c.tokenFile)
		if err != nil {
			return nil, usagef("--token-file: %v", err)
		}
		cl.Token = tok
	}
	if *c.caFile != "" {
		rt, err := cli.CoordinatorTransport(trust.TLSFiles{CA: *c.caFile})
		if err != nil {
			return nil, usagef("--ca-file: %v", err)
		}
		cl.HTTP.Transport = rt
	}
	return cl, nil
}

// subcommand returns args[0] when it is one of subs; -h prints c's usage.
func subcommand(c *command, e *env, args []string, subs ...string) (string, error) {
	if len(args) > 0 && slices.Contains(subs, args[0]) {
		return args[0], nil
	}
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
		fmt.Fprintf(e.stderr, "Usage: tmmu %s\n\n%s\n\n\"tmmu %s SUBCOMMAND --help\" lists a subcommand's flags (%s).\n", c.usage, c.summary, c.name, strings.Join(subs, ", "))
		return "", flag.ErrHelp
	}
	return "", usagef("%s needs a subcommand: %s", c.name, strings.Join(subs, " or "))
}

func runJob(c *command, e *env, args []string) error {
	sub, err := subcommand(c, e, args, "submit", "list", "history", "cancel", "delete", "export")
	if err != nil {
		return err
	}
	fs := newFlags(e, &command{name: "job " + sub, usage: c.usage, summary: c.summary})
	cf := addClusterFlags(fs)
	out := fs.String("o", "text", "output: text or json")
	var specFile, name, mode, strategy, arenaFile, policy, source, dataMode, reason *string
	var steps, every, keep, seed *uint64
	var elastic *bool
	var sf *submitDataFlags
	if sub == "submit" {
		specFile = fs.String("shard-spec", "", "shard spec file (required)")
		name = fs.String("name", "", "job name (required): 1 to 64 of A-Z a-z 0-9 _ -")
		steps = fs.Uint64("steps", 10, "steps to run (0: until stopped)")
		mode = fs.String("mode", "", "planning mode (default: the graph's)")
		strategy = fs.String("strategy", string(planner.Packed), "placement strategy")
		arenaFile = fs.String("arena-config", "", "arena config file (default: every arena aligned to 256 bytes in 128 MiB regions, WebGPU's default limits, so any worker's device can run the plan)")
		policy = fs.String("replan-policy", string(replan.AtSafepoint), "replan_at_safepoint or abort")
		dataMode = fs.String("data-mode", string(ir.DataStandard), "standard, confidential or regulated (the last two forbid debug fills and keep the loss out of logs and metrics)")
		every = fs.Uint64("checkpoint-every", api.DefaultCheckpointEvery, "checkpoint the model state every N steps (and at every epoch boundary and after the last step)")
		keep = fs.Uint64("checkpoint-keep", api.DefaultCheckpointKeep, "keep the last K checkpoints")
		seed = fs.Uint64("seed", 0, "the job's seed: the batch of a step and every random draw derive from (seed, step, rank)")
		elastic = fs.Bool("elastic", false, "shrink the job when ranks leave for good (it rolls back to its last checkpoint, recut for the ranks left) and grow it when they come back")
		source = fs.String("source", "", "instead of an IR file, a model source JSON file: {\"model\": \"gpt2\", \"config\": {...}, \"dims\": {\"seq\": {\"min\": 1, \"max\": 512, \"buckets\": [512, 1024]}}} (dynamic dimensions, for shape replans)")
		sf = addSubmitDataFlags(fs)
	}
	var exportOut *string
	var exportStep *uint64
	var withOpt *bool
	if sub == "export" {
		exportOut = fs.String("out", "", "the safetensors file to write (required)")
		exportStep = fs.Uint64("step", 0, "the committed checkpoint to export (default: the newest)")
		withOpt = fs.Bool("with-optimizer", false, "also write AdamW's moments (<name>.exp_avg, <name>.exp_avg_sq)")
	}
	if sub == "cancel" {
		reason = fs.String("reason", "", "why (recorded as the job's reason)")
	}
	pos, cl, err := cf.parse(e, fs, out, args[1:])
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *cf.timeout)
	defer cancel()
	if sub == "cancel" || sub == "delete" {
		if len(pos) != 1 {
			return usagef("job %s takes one job name", sub)
		}
		if sub == "delete" {
			if err := cl.Delete(ctx, pos[0]); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "job %s deleted: its workers stop; its checkpoints, reports and rank reservations are removed\n", pos[0])
			return nil
		}
		j, err := cl.Cancel(ctx, pos[0], *reason)
		if err != nil {
			return err
		}
		return emit(e, *out, j, func(w io.Writer) {
			fmt.Fprintf(w, "job %s %s at step %d (%s); its workers stop, its %d checkpoints stay\n", j.Spec.Name, j.Status, j.LastStep, j.Reason, len(j.Checkpoints))
		})
	}
	if sub == "export" {
		if len(pos) != 1 || *exportOut == "" {
			return usagef("job export takes one job name and --out FILE")
		}
		res, err := exportJob(ctx, cl, pos[0], *exportStep, *exportOut, *withOpt)
		if err != nil {
			return err
		}
		return emit(e, *out, res, func(w io.Writer) {
			fmt.Fprintf(w, "job %s: checkpoint of step %d (%d shards, world %d) exported to %s: %d tensors, %s names\n",
				res.Job, res.Step, res.World, res.World, res.Out, res.Tensors, res.Names)
		})
	}
	if sub == "history" {
		if len(pos) != 1 {
			return usagef("job history takes one job name")
		}
		j, err := cl.Job(ctx, pos[0])
		if err != nil {
			return err
		}
		h := history(j)
		return emit(e, *out, h, func(w io.Writer) { printHistory(w, j.Spec.Name, h) })
	}
	if sub == "list" {
		if len(pos) != 0 {
			return usagef("job list takes no arguments")
		}
		jobs, err := cl.Jobs(ctx)
		if err != nil {
			return err
		}
		return emit(e, *out, jobs, func(w io.Writer) { printJobs(w, jobs) })
	}
	if (len(pos) == 1) == (*source != "") || *specFile == "" || *name == "" {
		return usagef("job submit takes one IR file or --source, and --shard-spec and --name")
	}
	if *source != "" && *sf.bind != "" {
		return usagef("--bind renames an IR file's tensors: a --source model is generated with its inputs named")
	}
	spec, err := loadSpec(e, *specFile)
	if err != nil {
		return err
	}
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	req := &api.SubmitRequest{Name: *name, ShardSpec: specJSON, Mode: planner.Mode(*mode),
		Strategy: planner.Strategy(*strategy), Steps: *steps, ReplanPolicy: replan.Policy(*policy), DataMode: ir.DataMode(*dataMode),
		CheckpointEvery: *every, CheckpointKeep: *keep, Seed: *seed, Elastic: *elastic}
	if *source != "" {
		data, err := readInput(e, *source)
		if err != nil {
			return err
		}
		req.Model = &api.ModelSource{}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(req.Model); err != nil {
			return failure.New(failure.InvalidEncoding, opIO, fmt.Sprintf("model source %s: %v", *source, err), "file", *source)
		}
	} else {
		m, err := loadModel(e, pos[0])
		if err != nil {
			return err
		}
		if err := applyBind(m, *sf.bind); err != nil {
			return err
		}
		if req.IR, err = json.Marshal(m); err != nil {
			return err
		}
	}
	if err := sf.apply(ctx, cl, req); err != nil {
		return err
	}
	if *arenaFile != "" {
		if req.ArenaConfig, err = loadArenaConfig(e, *arenaFile); err != nil {
			return err
		}
	} else {
		// Planned for WebGPU's default limits, which every device meets,
		// so the workers can execute it wherever they run.
		req.ArenaConfig = engine.ExecutableArenas(engine.PortableLimits, nil)
	}
	j, err := cl.Submit(ctx, req)
	if err != nil {
		return err
	}
	if *out == "json" {
		return writeJSON(e.stdout, j)
	}
	cur := j.Current()
	fmt.Fprintf(e.stdout, "job %s submitted: epoch %d, %d ranks, status %s\nglobal_plan_hash %s\nshard_spec_hash  %s\nir_hash          %s\n",
		j.Spec.Name, cur.Epoch, len(cur.Expected), j.Status, cur.GlobalPlanHash, j.ShardSpecHash, j.IRHash)
	return nil
}

func printJobs(w io.Writer, jobs []api.JobSummary) {
	t := &table{align: "llrlrrrrrrl"}
	t.add("JOB", "STATUS", "EPOCH", "AGREED", "RANKS", "STEP", "OF", "LOSS", "VAL LOSS", "CHECKPOINT", "MISSING")
	for _, j := range jobs {
		agreed := "no"
		if j.Agreed {
			agreed = "yes"
		}
		missing := "-"
		if len(j.Missing) > 0 {
			missing = fmt.Sprint(j.Missing)
		}
		if len(j.Absent) > 0 {
			var xs []string
			for _, a := range j.Absent {
				x := fmt.Sprintf("%d", a.Rank)
				if a.Identity != "" {
					x += " (" + a.Identity + ")"
				}
				xs = append(xs, fmt.Sprintf("%s since %s", x, a.Since.Local().Format(time.TimeOnly)))
			}
			missing = strings.Join(xs, ", ")
		}
		steps := fmt.Sprint(j.Steps)
		if j.Steps == 0 {
			steps = "∞"
		}
		status := j.Status
		if j.Paused != "" {
			status += " (paused)"
		}
		ckpt := "-"
		if j.LastCheckpoint > 0 {
			ckpt = fmt.Sprintf("%d (%d kept)", j.LastCheckpoint, j.Checkpoints)
		}
		loss, val := "-", "-"
		if j.Loss != nil {
			loss = fmt.Sprintf("%.4f", j.Loss.Loss)
		}
		if j.Val != nil {
			val = fmt.Sprintf("%.4f (step %d)", j.Val.Loss, j.Val.Step)
		}
		t.add(j.Name, status, j.Epoch, agreed, j.WorldSize, j.LastStep, steps, loss, val, ckpt, missing)
	}
	t.write(w)
	for _, j := range jobs {
		if j.Reason != "" {
			fmt.Fprintf(w, "%s: %s\n", j.Name, j.Reason)
		}
		if j.Paused != "" {
			fmt.Fprintf(w, "%s: paused: %s\n", j.Name, j.Paused)
		}
		for _, p := range j.RankProblems {
			fmt.Fprintf(w, "%s: etcd: %s\n", j.Name, p)
		}
	}
}

func runStatus(c *command, e *env, args []string) error {
	fs := newFlags(e, c)
	cf := addClusterFlags(fs)
	out := fs.String("o", "text", "output: text or json")
	pos, cl, err := cf.parse(e, fs, out, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usagef("status takes no arguments")
	}
	ctx, cancel := context.WithTimeout(context.Background(), *cf.timeout)
	defer cancel()
	st, err := cl.Status(ctx)
	if err != nil {
		return err
	}
	return emit(e, *out, st, func(w io.Writer) { printStatus(w, st) })
}

func printStatus(w io.Writer, st *api.Status) {
	leader := st.Leader
	if leader == "" {
		leader = "(none)"
	}
	fmt.Fprintf(w, "cluster: leader %s  term %d  (answered by %s, %s, applied index %d; jobs as %s holds them)\n", leader, st.Term, st.ID, st.State, st.AppliedIndex, st.JobsFrom)
	t := &table{align: "lll"}
	t.add("VOTER", "RAFT", "HTTP")
	for _, v := range st.Voters {
		id := v.ID
		if v.ID == st.Leader {
			id += " (leader)"
		}
		t.add(id, v.RaftAddr, v.HTTPAddr)
	}
	t.write(w)
	fmt.Fprintln(w)
	printJobs(w, st.Jobs)
}

var rankCmd = &command{
	name:    "rank",
	summary: "Release an identity's rank reservation in etcd: a dead worker's rank goes to the next identity that claims, a malformed reservation is cleared.",
	usage:   "rank release JOB IDENTITY [cluster flags] [-o text|json]",
	run:     runRank,
}

func runRank(c *command, e *env, args []string) error {
	sub, err := subcommand(c, e, args, "release")
	if err != nil {
		return err
	}
	fs := newFlags(e, &command{name: "rank " + sub, usage: c.usage, summary: c.summary})
	cf := addClusterFlags(fs)
	out := fs.String("o", "text", "output: text or json")
	pos, cl, err := cf.parse(e, fs, out, args[1:])
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usagef("usage: tmmu %s", c.usage)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *cf.timeout)
	defer cancel()
	r, err := cl.ReleaseRank(ctx, pos[0], pos[1])
	if err != nil {
		return err
	}
	return emit(e, *out, r, func(w io.Writer) {
		fmt.Fprintf(w, "released %s's rank reservation in job %s: its rank goes to the next identity that claims once no live worker holds it\n", r.Identity, r.Job)
	})
}

var voterCmd = &command{
	name:    "voter",
	summary: "Add a coordinator to the raft cluster as a voter, or remove one.",
	usage:   "voter add ID RAFT_ADDR HTTP_ADDR [cluster flags] [-o text|json]\n       tmmu voter remove ID [cluster flags] [-o text|json]",
	run:     runVoter,
}

func runVoter(c *command, e *env, args []string) error {
	sub, err := subcommand(c, e, args, "add", "remove")
	if err != nil {
		return err
	}
	fs := newFlags(e, &command{name: "voter " + sub, usage: c.usage, summary: c.summary})
	cf := addClusterFlags(fs)
	out := fs.String("o", "text", "output: text or json")
	pos, cl, err := cf.parse(e, fs, out, args[1:])
	if err != nil {
		return err
	}
	if (sub == "add" && len(pos) != 3) || (sub == "remove" && len(pos) != 1) {
		return usagef("usage: tmmu %s", c.usage)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *cf.timeout)
	defer cancel()
	var st *api.Status
	if sub == "add" {
		st, err = cl.AddVoter(ctx, api.Peer{ID: pos[0], RaftAddr: pos[1], HTTPAddr: pos[2]})
	} else {
		st, err = cl.RemoveVoter(ctx, pos[0])
	}
	if err != nil {
		return err
	}
	return emit(e, *out, st, func(w io.Writer) { printStatus(w, st) })
}

// jobHistory is tmmu job history: the epochs and the checkpoints.
type jobHistory struct {
	Epochs      []epochRecord      `json:"epochs"`
	Checkpoints []checkpointRecord `json:"checkpoints"`
	Dropped     []checkpointRecord `json:"dropped_checkpoints,omitempty"`
	// Optimizer is the job's optimizer and hyper-parameters, Data and
	// Weights what it trains on and starts from (nil: the synthetic task,
	// the default initialisation), Loss the ranks' mean training loss of
	// the newest step they all reported, Validations the validation
	// losses: enough to reproduce and judge the run elsewhere.
	Optimizer   api.Optimizer  `json:"optimizer"`
	Data        *api.DataSpec  `json:"data,omitempty"`
	Weights     *api.DataRef   `json:"weights,omitempty"`
	Loss        *api.StepLoss  `json:"loss,omitempty"`
	Validations []api.StepLoss `json:"validations,omitempty"`
}

// epochRecord is one epoch of tmmu job history.
type epochRecord struct {
	Epoch       uint64                 `json:"epoch"`
	StartStep   uint64                 `json:"start_step"`
	Reason      string                 `json:"reason"`
	OldPlanHash string                 `json:"old_global_plan_hash,omitempty"`
	NewPlanHash string                 `json:"new_global_plan_hash"`
	Strategy    planner.Strategy       `json:"strategy"`
	World       uint64                 `json:"world"`
	Envelope    map[string]ir.DimRange `json:"envelope,omitempty"`
	Restore     *api.Restore           `json:"restore,omitempty"`
	Agreed      *bool                  `json:"agreed,omitempty"` // nil while agreeing
	AgreementMs float64                `json:"agreement_ms,omitempty"`
}

// checkpointRecord is one checkpoint of tmmu job history.
type checkpointRecord struct {
	Step       uint64   `json:"step"`
	Epoch      uint64   `json:"epoch"`
	World      uint64   `json:"world"`
	Bytes      uint64   `json:"bytes"`
	WriteMs    float64  `json:"write_ms"`
	StateHash  []string `json:"state_hashes"` // by rank
	Committed  string   `json:"committed_at"`
	DropReason string   `json:"reason,omitempty"`
}

func history(j *api.Job) jobHistory {
	var out jobHistory
	for i, e := range j.Epochs {
		_, opts, env := j.Inputs(uint64(i))
		spec, _ := j.World(uint64(i))
		r := epochRecord{Epoch: e.Epoch, StartStep: e.StartStep, Reason: e.Reason, NewPlanHash: e.GlobalPlanHash.String(), Strategy: opts.Strategy,
			World: spec.WorldSize, Envelope: env, Restore: e.Restore}
		if i > 0 {
			r.OldPlanHash = j.Epochs[i-1].GlobalPlanHash.String()
		}
		if o := e.Outcome; o != nil {
			agreed := o.Agreed
			r.Agreed = &agreed
			if o.At > 0 && e.CommittedAt > 0 {
				r.AgreementMs = float64(o.At-e.CommittedAt) / 1e6
			}
		}
		out.Epochs = append(out.Epochs, r)
	}
	rec := func(k api.Checkpoint) checkpointRecord {
		c := checkpointRecord{Step: k.Step, Epoch: k.Epoch, World: k.World, Bytes: k.Bytes, WriteMs: float64(k.WriteNanos) / 1e6,
			Committed: time.Unix(0, k.CommittedAt).UTC().Format(time.RFC3339Nano), DropReason: k.Reason}
		for _, sh := range k.Shards {
			c.StateHash = append(c.StateHash, sh.StateHash.String())
		}
		return c
	}
	out.Checkpoints = []checkpointRecord{}
	for _, k := range j.Checkpoints {
		out.Checkpoints = append(out.Checkpoints, rec(k))
	}
	for _, k := range j.Dropped {
		out.Dropped = append(out.Dropped, rec(k))
	}
	out.Optimizer, out.Data, out.Weights, out.Loss, out.Validations = j.Spec.OptimizerOf(), j.Spec.Data, j.Spec.Weights, j.Loss, j.Validations
	return out
}

func printHistory(w io.Writer, name string, h jobHistory) {
	t := &table{align: "rrrlllrl"}
	t.add("EPOCH", "FROM STEP", "RANKS", "OLD PLAN", "NEW PLAN", "STRATEGY", "AGREEMENT", "REASON")
	for _, r := range h.Epochs {
		old := "-"
		if r.OldPlanHash != "" {
			old = r.OldPlanHash[:12]
		}
		agreement := "agreeing"
		if r.Agreed != nil {
			agreement = fmt.Sprintf("%.1f ms", r.AgreementMs)
			if !*r.Agreed {
				agreement = "NOT AGREED"
			}
		}
		reason := r.Reason
		if len(r.Envelope) > 0 {
			var dims []string
			for _, d := range slices.Sorted(maps.Keys(r.Envelope)) {
				dims = append(dims, fmt.Sprintf("%s=[%d,%d]", d, r.Envelope[d].Min, r.Envelope[d].Max))
			}
			reason += " (" + strings.Join(dims, " ") + ")"
		}
		t.add(r.Epoch, r.StartStep, r.World, old, r.NewPlanHash[:12], r.Strategy, agreement, reason)
	}
	fmt.Fprintf(w, "job %s: %d epochs\n", name, len(h.Epochs))
	t.write(w)
	fmt.Fprintf(w, "\n%d checkpoints kept\n", len(h.Checkpoints))
	ct := &table{align: "rrrrrll"}
	ct.add("STEP", "EPOCH", "RANKS", "BYTES", "WRITE", "STATE (RANK 0)", "COMMITTED")
	for _, k := range h.Checkpoints {
		state := "-"
		if len(k.StateHash) > 0 {
			state = k.StateHash[0][:12]
		}
		ct.add(k.Step, k.Epoch, k.World, planner.FormatBytes(k.Bytes), fmt.Sprintf("%.1f ms", k.WriteMs), state, k.Committed)
	}
	ct.write(w)
	for _, k := range h.Dropped {
		fmt.Fprintf(w, "dropped: the checkpoint of step %d: %s\n", k.Step, k.DropReason)
	}
	o := h.Optimizer
	fmt.Fprintf(w, "\noptimizer %s: lr %s, betas (%s, %s), eps %s, weight decay %s\n", o.Name, o.LR, o.Beta1, o.Beta2, o.Eps, o.WeightDecay)
	if d := h.Data; d != nil {
		fmt.Fprintf(w, "data %s (%s, %s order, digest %s)", d.Train.String(), d.Train.Format, d.Order, d.Train.Digest.Short())
		if d.Val != nil {
			fmt.Fprintf(w, "; validation %s, %d batches", d.Val.String(), d.ValBatches)
		}
		fmt.Fprintln(w)
	} else {
		fmt.Fprintln(w, "data: the synthetic counting task")
	}
	if h.Weights != nil {
		fmt.Fprintf(w, "initial weights %s (sha256 %s)\n", h.Weights.String(), h.Weights.Digest.Short())
	}
	if h.Loss != nil {
		fmt.Fprintf(w, "loss %.4f at step %d (mean over the ranks)\n", h.Loss.Loss, h.Loss.Step)
	}
	if len(h.Validations) > 0 {
		vt := &table{align: "rr"}
		vt.add("STEP", "VAL LOSS")
		for _, v := range h.Validations {
			vt.add(v.Step, fmt.Sprintf("%.4f", v.Loss))
		}
		vt.write(w)
	}
}

var replanCmd = &command{
	name:    "replan",
	summary: "Ask the coordinators for a new plan epoch at the next safepoint: a new arena config, strategy or envelope (a request that changes nothing is answered with decision none).",
	usage:   "replan --job NAME --reason TEXT [--arena-config FILE] [--strategy S] [--envelope FILE] [--id ID] [cluster flags] [-o text|json]",
	run:     runReplan,
}

func runReplan(c *command, e *env, args []string) error {
	fs := newFlags(e, c)
	cf := addClusterFlags(fs)
	job := fs.String("job", "", "job name (required)")
	reason := fs.String("reason", "", "why (required; recorded in the job history)")
	arenaFile := fs.String("arena-config", "", "new arena config file")
	strategy := fs.String("strategy", "", "new placement strategy")
	envFile := fs.String("envelope", "", "JSON file {\"seq\": [min, max], ...}: new ranges for the job's dynamic dimensions")
	id := fs.String("id", "", "request id; a retry with the same id is not acted on twice")
	out := fs.String("o", "text", "output: text or json")
	pos, cl, err := cf.parse(e, fs, out, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 || *job == "" || *reason == "" {
		return usagef("replan takes --job and --reason")
	}
	req := &api.ReplanRequest{ID: *id, Reason: *reason, Strategy: planner.Strategy(*strategy)}
	if *arenaFile != "" {
		if req.ArenaConfig, err = loadArenaConfig(e, *arenaFile); err != nil {
			return err
		}
	}
	if *envFile != "" {
		data, err := readInput(e, *envFile)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(data, &req.Envelope); err != nil {
			return failure.New(failure.InvalidEncoding, opIO, fmt.Sprintf("envelope %s: %v", *envFile, err), "file", *envFile)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), *cf.timeout)
	defer cancel()
	r, err := cl.Replan(ctx, *job, "", req)
	if err != nil {
		return err
	}
	if *out == "json" {
		return writeJSON(e.stdout, r)
	}
	switch r.Decision {
	case "replan":
		fmt.Fprintf(e.stdout, "job %s: epoch %d committed; every rank switches at step %d\n", *job, r.Epoch, r.Boundary)
	default:
		fmt.Fprintf(e.stdout, "job %s: request %s, decision %s\n", *job, r.Ack, r.Decision)
	}
	for _, x := range r.Reasons {
		fmt.Fprintf(e.stdout, "  %s\n", x)
	}
	return nil
}
