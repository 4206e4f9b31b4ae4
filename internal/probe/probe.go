// Package probe attacks a running tmmu cluster the way someone holding one
// worker's credentials (and, for the input attacks, a valid API token)
// would, and reports whether the cluster refused each attack: reports in
// another identity's keys, reports that name a rank their identity does
// not hold, streams that republish into the coordinators' subjects,
// announcements and grants that the coordinators did not sign, a raft
// peer without a coordinator's certificate, etcd without credentials,
// oversized and unbounded submissions, a bogus voter, reads without a
// token and reads of the datasets store around the coordinators. `tmmu
// probe` runs it against a deployment (the compose e2e
// does); the security tests run it against an in-process cluster.
//
// Every attack leaves the cluster as it was, but for what the attack
// itself would leave (a probe job that is deleted again, the probing
// identity's own keys).
package probe

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/tmmu/tmmu/coord"
	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/models"
	"github.com/tmmu/tmmu/transport"
)

// Target is the cluster under attack and what the attacker holds.
type Target struct {
	// NATSURL and NATS: the server and the connect options of the one
	// worker identity the attacker holds (Identity): its nkey and
	// certificate.
	NATSURL  string
	NATS     []nats.Option
	Identity string
	// Etcd are the etcd endpoints, tried with no client certificate.
	Etcd []string
	// Raft are the coordinators' raft addresses; RaftTLS, the worker's
	// client TLS config (its certificate), tried besides none at all.
	Raft    []string
	RaftTLS *tls.Config
	// Coordinators are the API URLs; HTTP reaches them (the cluster's
	// CA); APIToken is a valid API token, for the input attacks.
	Coordinators []string
	HTTP         *http.Client
	APIToken     string
	// Job is a running job: its committed progress must not move for
	// the forgeries, and must keep moving while the attacks go on.
	Job string
	// WorkerMetrics are the /metrics URLs of the job's workers: each must
	// count the unsigned grant it ignored
	// (tmmu_worker_rejected_decisions_total).
	WorkerMetrics []string
}

// Result is what one attack found.
type Result struct {
	Attack  string `json:"attack"`
	Refused bool   `json:"refused"`
	Detail  string `json:"detail"`
}

// attack is one attack: it returns the refusal observed, or an error
// saying what the cluster accepted (or why the attack could not run).
type attack struct {
	name string
	run  func(*prober, context.Context) (string, error)
}

var attacks = []attack{
	{"write another identity's plan report, step report, progress and checkpoint report keys", (*prober).otherKeys},
	{"report plan hashes for ranks this identity holds no claim of (a job with no workers)", (*prober).forgedPlans},
	{"report progress for another rank, far ahead, under this identity's own key", (*prober).forgedProgress},
	{"create a stream that republishes, mirrors or sources into the coordinators' subjects", (*prober).streams},
	{"publish an outcome and a grant on the coordinators' subjects", (*prober).publishDecisions},
	{"deliver an unsigned grant through a consumer into the announcement subject", (*prober).deliveredGrant},
	{"request raft votes (with leadership transfer) as voter c2 without a coordinator certificate", (*prober).raftVote},
	{"read and write etcd without credentials", (*prober).etcd},
	{"submit a 100 MB job", (*prober).bigSubmission},
	{"add a voter at a bogus address", (*prober).bogusVoter},
	{"submit a job with window 2^64-1", (*prober).hugeWindow},
	{"read jobs, IRs, plans and status without a token", (*prober).tokenlessReads},
	{"read the datasets and weights store directly, around the coordinators", (*prober).dataStore},
}

// Names lists the attacks in the order Run makes them.
func Names() []string {
	out := make([]string, len(attacks))
	for i, a := range attacks {
		out[i] = a.name
	}
	return out
}

type prober struct {
	t   Target
	nc  *nats.Conn
	js  jetstream.JetStream
	tr  *transport.Transport // bound to the identity, as its worker's would be
	api *api.Client
}

// Run makes every attack in turn and returns what each found. It fails
// only when it cannot reach the cluster at all.
func Run(ctx context.Context, t Target) ([]Result, error) {
	if t.HTTP == nil {
		t.HTTP = &http.Client{Timeout: 30 * time.Second}
	}
	// Permission violations are what the attacks expect: each attack
	// observes its own refusal, so the connection's are not printed.
	quiet := nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})
	nc, err := nats.Connect(t.NATSURL, append([]nats.Option{nats.Name("tmmu-probe"), quiet}, t.NATS...)...)
	if err != nil {
		return nil, fmt.Errorf("probe: connecting to NATS as %s: %w", t.Identity, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	tr, err := transport.New(nc, transport.OpenOnly(), transport.WithIdentity(t.Identity))
	if err != nil {
		return nil, fmt.Errorf("probe: opening the buckets as %s: %w", t.Identity, err)
	}
	api := api.NewClient(t.Coordinators...)
	// The client's own HTTP client keeps the token across a follower's
	// redirect to the leader; it takes t.HTTP's transport (the CA).
	api.HTTP.Transport, api.Token = t.HTTP.Transport, t.APIToken
	p := &prober{t: t, nc: nc, js: js, tr: tr, api: api}
	var out []Result
	for _, a := range attacks {
		actx, cancel := context.WithTimeout(ctx, 90*time.Second)
		detail, err := a.run(p, actx)
		cancel()
		r := Result{Attack: a.name, Refused: err == nil, Detail: detail}
		if err != nil {
			r.Detail = err.Error()
		}
		out = append(out, r)
	}
	return out, nil
}

// refusedPut says whether a KV put is refused (nats-server drops a
// publish its permissions deny: the put times out unanswered).
func (p *prober) refusedPut(ctx context.Context, bucket, key string, value []byte) error {
	kv, err := p.js.KeyValue(ctx, bucket)
	if err != nil {
		return fmt.Errorf("opening %s: %w", bucket, err)
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := kv.Put(pctx, key, value); err == nil {
		return fmt.Errorf("%s %s: stored", bucket, key)
	}
	return nil
}

func (p *prober) job(ctx context.Context) (*api.Job, error) { return p.api.Job(ctx, p.t.Job) }

// victim is an identity that holds a rank of the job (not the attacker).
func (p *prober) victim(ctx context.Context) (string, uint64, *api.Job, error) {
	j, err := p.job(ctx)
	if err != nil {
		return "", 0, nil, err
	}
	e := j.Current()
	for k := len(j.Epochs) - 1; k >= 0; k-- {
		if h := j.Holders(uint64(k)); h != nil {
			for r, id := range h {
				if id != "" && id != p.t.Identity {
					return id, uint64(r), j, nil
				}
			}
		}
	}
	return "victim", 0, j, fmt.Errorf("job %s epoch %d names no holder", p.t.Job, e.Epoch)
}

func (p *prober) otherKeys(ctx context.Context) (string, error) {
	id, rank, j, err := p.victim(ctx)
	if err != nil {
		return "", err
	}
	e := j.Current().Epoch
	tok := transport.IdentityToken(id)
	step := j.LastStep + 1
	h := ir.Hash{1}
	forgeries := []struct {
		bucket, key string
		v           any
	}{
		{transport.Bucket, fmt.Sprintf("%s.%d.%d.%s", p.t.Job, e+1, rank, tok), transport.PlanReport{Job: p.t.Job, Epoch: e + 1, Rank: rank, Identity: id, PlanHash: h}},
		{transport.StepsBucket, fmt.Sprintf("%s.%d.%d.%s", p.t.Job, e, rank, tok), transport.StepReport{Job: p.t.Job, Epoch: e, Rank: rank, Step: step + 1000, PlanHash: h, Identity: id}},
		{transport.ProgressBucket, p.t.Job + "." + tok, transport.StepDone{Job: p.t.Job, Epoch: e, Rank: rank, Step: step + 1000, Identity: id}},
		{transport.CheckpointBucket, fmt.Sprintf("%s.%d.%d.%d.%s", p.t.Job, step, e, rank, tok), transport.CheckpointReport{Job: p.t.Job, Step: step, Epoch: e, Rank: rank, Identity: id, Digest: h, StateHash: h}},
	}
	for _, f := range forgeries {
		data, err := transport.Encode(f.v)
		if err != nil {
			return "", err
		}
		if err := p.refusedPut(ctx, f.bucket, f.key, data); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("NATS refused all 4 puts into %s's keys (rank %d)", id, rank), nil
}

// leader returns the leader's API URL.
func (p *prober) leader(ctx context.Context) (string, error) {
	st, err := p.api.Status(ctx)
	if err != nil {
		return "", err
	}
	base := p.t.Coordinators[0]
	if st.LeaderHTTP != "" {
		base = base[:strings.Index(base, "://")+3] + st.LeaderHTTP
	}
	return base, nil
}

// forgedMetric reads tmmu_forged_reports_total{kind} on the leader.
func (p *prober) forgedMetric(ctx context.Context, kind string) (float64, error) {
	base, err := p.leader(ctx)
	if err != nil {
		return 0, err
	}
	return metric(ctx, p.t.HTTP, base+"/metrics", "tmmu_forged_reports_total", `kind="`+kind+`"`)
}

// metric returns the value of a Prometheus sample named name whose labels
// contain label.
func metric(ctx context.Context, c *http.Client, url, name, label string) (float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, name) && strings.Contains(line, label) {
			f := strings.Fields(line)
			return strconv.ParseFloat(f[len(f)-1], 64)
		}
	}
	return 0, fmt.Errorf("%s has no %s{%s}", url, name, label)
}

// waitMetric waits until the forged-report count of kind reaches want.
func (p *prober) waitMetric(ctx context.Context, kind string, want float64) (float64, error) {
	var got float64
	var err error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if got, err = p.forgedMetric(ctx, kind); err == nil && got >= want {
			return got, nil
		}
	}
	return got, fmt.Errorf("tmmu_forged_reports_total{kind=%q} is %v, want %v (%v)", kind, got, want, err)
}

func (p *prober) forgedPlans(ctx context.Context) (string, error) {
	name := fmt.Sprintf("probe-%d", time.Now().UnixNano())
	m, err := models.GPT2(models.GPT2Config{Layers: 1, Hidden: 16, Heads: 2, Seq: 4, Context: 4, Batch: 1, Vocab: 16, DType: ir.F32, Train: true})
	if err != nil {
		return "", err
	}
	irJSON, _ := json.Marshal(m)
	j, err := p.api.Submit(ctx, &api.SubmitRequest{Name: name, IR: irJSON, ShardSpec: json.RawMessage(`{"world_size": 4, "data_parallel": {"zero_stage": 1}}`), Steps: 1})
	if err != nil {
		return "", fmt.Errorf("submitting the probe job: %w", err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		p.api.Delete(dctx, name)
	}()
	before, err := p.forgedMetric(ctx, coord.ForgedPlan)
	if err != nil {
		return "", err
	}
	e := j.Current()
	for r, h := range e.Expected {
		// The right hashes (the API shows them), under this identity's
		// own keys, naming a claim revision it never had.
		rep := transport.PlanReport{Job: name, Epoch: e.Epoch, Rank: uint64(r), Identity: p.t.Identity, PlanHash: h, ClaimRevision: int64(1 + r)}
		if err := p.tr.Report(ctx, rep); err != nil {
			return "", fmt.Errorf("storing a report under the identity's own key: %w", err)
		}
	}
	got, err := p.waitMetric(ctx, coord.ForgedPlan, before+float64(len(e.Expected)))
	if err != nil {
		return "", err
	}
	time.Sleep(time.Second)
	if j, err = p.api.Job(ctx, name); err != nil {
		return "", err
	}
	if j.Current().Outcome != nil {
		return "", fmt.Errorf("the probe job got an outcome: %+v", j.Current().Outcome)
	}
	return fmt.Sprintf("the leader dropped %d forged plan reports (tmmu_forged_reports_total{kind=\"plan\"} %v → %v); job %s stays %s with no outcome",
		len(e.Expected), before, got, name, j.Status), nil
}

func (p *prober) forgedProgress(ctx context.Context) (string, error) {
	id, rank, j, err := p.victim(ctx)
	if err != nil {
		return "", err
	}
	before, err := p.forgedMetric(ctx, coord.ForgedProgress)
	if err != nil {
		return "", err
	}
	far := j.LastStep + 100000
	d := transport.StepDone{Job: p.t.Job, Epoch: j.Current().Epoch, Rank: rank, Step: far, Identity: p.t.Identity}
	if err := p.tr.PutProgress(ctx, d); err != nil {
		return "", err
	}
	got, err := p.waitMetric(ctx, coord.ForgedProgress, before+1)
	if err != nil {
		return "", err
	}
	after, err := p.job(ctx)
	if err != nil {
		return "", err
	}
	if after.LastStep >= far {
		return "", fmt.Errorf("the committed progress moved to step %d", after.LastStep)
	}
	return fmt.Sprintf("progress for rank %d (held by %s) at step %d dropped (tmmu_forged_reports_total{kind=\"progress\"} %v → %v); committed progress %d",
		rank, id, far, before, got, after.LastStep), nil
}

func (p *prober) streams(ctx context.Context) (string, error) {
	dest := transport.SubjectPrefix + "." + p.t.Job + ".announce"
	cfgs := []jetstream.StreamConfig{
		{Name: "PROBE_REPUBLISH", Subjects: []string{"probe.republish"}, RePublish: &jetstream.RePublish{Source: ">", Destination: dest}},
		{Name: "PROBE_MIRROR", Mirror: &jetstream.StreamSource{Name: "KV_" + transport.Bucket}},
		{Name: "PROBE_SOURCE", Sources: []*jetstream.StreamSource{{Name: "KV_" + transport.ProgressBucket}}},
		{Name: "KV_" + transport.Bucket, Subjects: []string{"$KV." + transport.Bucket + ".>"}, RePublish: &jetstream.RePublish{Source: ">", Destination: dest}},
	}
	for i, c := range cfgs {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		var err error
		if i == len(cfgs)-1 {
			_, err = p.js.UpdateStream(cctx, c)
		} else {
			_, err = p.js.CreateStream(cctx, c)
		}
		cancel()
		if err == nil {
			return "", fmt.Errorf("stream %s accepted", c.Name)
		}
	}
	return "NATS refused creating a republishing, a mirroring and a sourcing stream, and updating a bucket's stream to republish", nil
}

func (p *prober) publishDecisions(ctx context.Context) (string, error) {
	errs := make(chan error, 4)
	nc, err := nats.Connect(p.t.NATSURL, append(append([]nats.Option{}, p.t.NATS...), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case errs <- err:
		default:
		}
	}))...)
	if err != nil {
		return "", err
	}
	defer nc.Close()
	grant, _ := transport.Encode(transport.Announcement{Job: p.t.Job, Kind: transport.KindGrant, StartStep: math.MaxUint32})
	outcome, _ := transport.Encode(transport.Outcome{Job: p.t.Job, Agreed: true})
	nc.Publish(transport.SubjectPrefix+"."+p.t.Job+".announce", grant)
	nc.Publish(transport.SubjectPrefix+"."+p.t.Job+".outcome", outcome)
	nc.Flush()
	n := 0
	for deadline := time.After(5 * time.Second); n < 2; {
		select {
		case err := <-errs:
			if strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
				n++
			}
		case <-deadline:
			return "", fmt.Errorf("%d of 2 publishes refused", n)
		}
	}
	return "NATS refused both publishes (permissions violation)", nil
}

// rejected sums tmmu_worker_rejected_decisions_total over the workers.
func (p *prober) rejected(ctx context.Context) (float64, error) {
	var sum float64
	for _, u := range p.t.WorkerMetrics {
		v, err := metric(ctx, p.t.HTTP, u, "tmmu_worker_rejected_decisions_total", "")
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

func (p *prober) deliveredGrant(ctx context.Context) (string, error) {
	j, err := p.job(ctx)
	if err != nil {
		return "", err
	}
	if len(p.t.WorkerMetrics) == 0 {
		return "", errors.New("no worker metrics to tell whether the workers ignored the grant (give the workers' /metrics URLs)")
	}
	rejectedBefore, err := p.rejected(ctx)
	if err != nil {
		return "", err
	}
	// The attacker's own progress key holds an announcement's bytes; a
	// push consumer delivers it into the job's announcement subject.
	grant, _ := transport.Encode(transport.Announcement{Job: p.t.Job, Epoch: j.Current().Epoch, Kind: transport.KindGrant, StartStep: j.LastStep + 100000, Incarnation: j.Incarnation()})
	kv, err := p.js.KeyValue(ctx, transport.ProgressBucket)
	if err != nil {
		return "", err
	}
	key := p.t.Job + "." + transport.IdentityToken(p.t.Identity)
	if _, err := kv.Put(ctx, key, grant); err != nil {
		return "", fmt.Errorf("own progress key: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	c, cerr := p.js.CreateOrUpdateConsumer(cctx, "KV_"+transport.ProgressBucket, jetstream.ConsumerConfig{
		FilterSubject: "$KV." + transport.ProgressBucket + "." + key, DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy, AckPolicy: jetstream.AckNonePolicy,
	})
	cancel()
	how := "a pull consumer (no delivery into the subject)"
	if cerr == nil {
		_ = c
		// The server lets a push consumer deliver anywhere: what stops
		// the grant is its missing signature.
		how = "a consumer was allowed"
	}
	legacy, err := p.nc.JetStream()
	if err != nil {
		return "", err
	}
	sub, err := legacy.SubscribeSync("$KV."+transport.ProgressBucket+"."+key, nats.BindStream("KV_"+transport.ProgressBucket), nats.DeliverSubject(transport.SubjectPrefix+"."+p.t.Job+".announce"), nats.DeliverLast(), nats.AckNone())
	if err == nil {
		how = "a push consumer delivered it into " + transport.SubjectPrefix + "." + p.t.Job + ".announce"
		time.Sleep(3 * time.Second)
		sub.Unsubscribe()
	}
	kv.Delete(context.WithoutCancel(ctx), key)
	after, err := p.job(ctx)
	if err != nil {
		return "", err
	}
	// Ranks may run the job's window past the committed progress.
	steps, err := p.readySteps(ctx, after)
	if err != nil {
		return "", err
	}
	if horizon := after.LastStep + after.Spec.Window + 1; steps > horizon {
		return "", fmt.Errorf("ranks reported ready for step %d, past the horizon %d: the unsigned grant was obeyed", steps, horizon)
	}
	rejectedAfter, err := p.rejected(ctx)
	if err != nil {
		return "", err
	}
	if rejectedAfter < rejectedBefore+float64(len(p.t.WorkerMetrics)) {
		return "", fmt.Errorf("%s; the %d workers counted %v rejected decisions (was %v): the grant was not refused by each",
			how, len(p.t.WorkerMetrics), rejectedAfter, rejectedBefore)
	}
	return fmt.Sprintf("%s; the %d workers ignored it (tmmu_worker_rejected_decisions_total %v → %v); no rank went past the committed horizon (ready at most for step %d, committed %d, window %d)",
		how, len(p.t.WorkerMetrics), rejectedBefore, rejectedAfter, steps, after.LastStep, after.Spec.Window), nil
}

// readySteps returns the highest step any rank reported ready for under
// the job's current epoch.
func (p *prober) readySteps(ctx context.Context, j *api.Job) (uint64, error) {
	rs, err := p.tr.Steps(ctx, p.t.Job, j.Current().Epoch)
	if err != nil {
		return 0, err
	}
	var top uint64
	for _, r := range rs {
		top = max(top, r.Step)
	}
	return top, nil
}

// sum adds up a metric over every coordinator (absent counts 0).
func (p *prober) sum(ctx context.Context, name, label string) float64 {
	var total float64
	for _, u := range p.t.Coordinators {
		if v, err := metric(ctx, p.t.HTTP, u+"/metrics", name, label); err == nil {
			total += v
		}
	}
	return total
}

// answers counts the coordinators' API answers with status code.
func (p *prober) answers(ctx context.Context, code int) float64 {
	return p.sum(ctx, "tmmu_coordinator_http_responses_total", fmt.Sprintf(`code="%d"`, code))
}

func (p *prober) raftVote(ctx context.Context) (string, error) {
	before, err := p.api.Status(ctx)
	if err != nil {
		return "", err
	}
	const refusedMetric = "tmmu_coordinator_raft_refused_connections_total"
	refusedBefore := p.sum(ctx, refusedMetric, "")
	trans, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, 3*time.Second, io.Discard)
	if err != nil {
		return "", err
	}
	defer trans.Close()
	var refused []string
	for _, addr := range p.t.Raft {
		req := &raft.RequestVoteRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("c2"), Addr: []byte(addr)}, Term: before.Term + 100,
			LastLogIndex: math.MaxUint32, LastLogTerm: before.Term + 100, LeadershipTransfer: true}
		var resp raft.RequestVoteResponse
		if err := trans.RequestVote("c2", raft.ServerAddress(addr), req, &resp); err == nil {
			return "", fmt.Errorf("%s answered a plain RequestVote: granted %v", addr, resp.Granted)
		}
		// And with the worker's certificate, over TLS.
		if p.t.RaftTLS != nil {
			d := &net.Dialer{Timeout: 3 * time.Second}
			cfg := p.t.RaftTLS.Clone()
			cfg.InsecureSkipVerify = true // the attacker does not care who answers
			cfg.VerifyConnection = nil
			if c, err := tls.DialWithDialer(d, "tcp", addr, cfg); err == nil {
				c.SetDeadline(time.Now().Add(3 * time.Second))
				_, werr := c.Write([]byte{0})
				_, rerr := c.Read(make([]byte, 1))
				c.Close()
				if werr == nil && rerr == nil {
					return "", fmt.Errorf("%s kept a TLS connection with a worker's certificate", addr)
				}
			}
		}
		refused = append(refused, addr)
	}
	time.Sleep(2 * time.Second)
	after, err := p.api.Status(ctx)
	if err != nil {
		return "", err
	}
	if after.Term != before.Term || after.Leader != before.Leader {
		return "", fmt.Errorf("leadership moved: %s term %d → %s term %d", before.Leader, before.Term, after.Leader, after.Term)
	}
	refusedAfter := p.sum(ctx, refusedMetric, "")
	if refusedAfter <= refusedBefore {
		return "", fmt.Errorf("the coordinators counted no refused raft connection (%s %v)", refusedMetric, refusedAfter)
	}
	return fmt.Sprintf("%v refused the vote request (no certificate) and a worker's certificate (%s %v → %v); leader %s, term %d unchanged",
		refused, refusedMetric, refusedBefore, refusedAfter, after.Leader, after.Term), nil
}

func (p *prober) etcd(ctx context.Context) (string, error) {
	var notes []string
	for _, tlsCfg := range []*tls.Config{nil, {InsecureSkipVerify: true}} {
		eps := p.t.Etcd
		if tlsCfg == nil {
			eps = nil
			for _, e := range p.t.Etcd {
				eps = append(eps, strings.Replace(e, "https://", "http://", 1))
			}
		}
		cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 3 * time.Second, TLS: tlsCfg, Logger: zap.NewNop()})
		if err != nil {
			notes = append(notes, "dial refused")
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 4*time.Second)
		_, gerr := cli.Get(cctx, "/tmmu/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		_, perr := cli.Put(cctx, "/tmmu/probe", "x")
		cancel()
		cli.Close()
		if gerr == nil || perr == nil {
			return "", fmt.Errorf("etcd answered without a client certificate (get: %v, put: %v)", gerr, perr)
		}
		mode := "plain"
		if tlsCfg != nil {
			mode = "TLS without a client certificate"
		}
		notes = append(notes, mode+": "+short(gerr))
	}
	return "etcd refused " + strings.Join(notes, "; "), nil
}

func short(err error) string {
	s := err.Error()
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return s
}

// post sends a body to the leader's API with the token and returns the
// status and the answer.
func (p *prober) post(ctx context.Context, path string, body io.Reader) (int, string, error) {
	base, err := p.leader(ctx)
	if err != nil {
		return 0, "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, body)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+p.t.APIToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.t.HTTP.Do(req)
	if err != nil {
		return 0, "", err
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return resp.StatusCode, strings.TrimSpace(string(b)), nil
}

func (p *prober) bigSubmission(ctx context.Context) (string, error) {
	before, err := p.job(ctx)
	if err != nil {
		return "", err
	}
	counted := p.answers(ctx, http.StatusRequestEntityTooLarge)
	// 100 MB: a valid prefix, then padding inside the IR's name.
	const size = 100 << 20
	body := io.MultiReader(strings.NewReader(`{"name": "probe-big", "steps": 1, "shard_spec": {"world_size": 1}, "ir": {"name": "`),
		io.LimitReader(repeat('x'), size), strings.NewReader(`"}}`))
	status, answer, err := p.post(ctx, "/v1/jobs", body)
	if err != nil && status == 0 {
		// The server may close the connection while the client still
		// sends: that is a refusal too, if nothing was committed.
		answer = err.Error()
	} else if status != http.StatusRequestEntityTooLarge {
		return "", fmt.Errorf("a 100 MB submission: %d %s", status, answer)
	}
	if _, err := p.api.Job(ctx, "probe-big"); !errors.Is(err, api.ErrNotFound) {
		return "", fmt.Errorf("job probe-big: %v, want not found", err)
	}
	// The cluster keeps committing steps.
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		after, err := p.job(ctx)
		if err == nil && after.LastStep > before.LastStep {
			if now := p.answers(ctx, http.StatusRequestEntityTooLarge); now <= counted {
				return "", fmt.Errorf("413 answers counted %v → %v", counted, now)
			}
			return fmt.Sprintf("%d %s (413 answers counted %v → %v); job %s went on from step %d to %d", status, trimAnswer(answer),
				counted, p.answers(ctx, http.StatusRequestEntityTooLarge), p.t.Job, before.LastStep, after.LastStep), nil
		}
	}
	return "", fmt.Errorf("job %s committed no step after the 100 MB submission (at %d)", p.t.Job, before.LastStep)
}

type repeat byte

func (r repeat) Read(b []byte) (int, error) {
	for i := range b {
		b[i] = byte(r)
	}
	return len(b), nil
}

func trimAnswer(s string) string {
	var e api.APIError
	if json.Unmarshal([]byte(s), &e) == nil && e.Error != "" {
		return e.Error
	}
	return s
}

func (p *prober) bogusVoter(ctx context.Context) (string, error) {
	before, err := p.api.Status(ctx)
	if err != nil {
		return "", err
	}
	counted := p.answers(ctx, http.StatusBadRequest)
	status, answer, err := p.post(ctx, "/v1/voters", strings.NewReader(`{"id": "probe", "raft_addr": "not-an-addr"}`))
	if err != nil {
		return "", err
	}
	if status != http.StatusBadRequest {
		return "", fmt.Errorf("bogus voter: %d %s", status, answer)
	}
	after, err := p.api.Status(ctx)
	if err != nil {
		return "", err
	}
	if len(after.Voters) != len(before.Voters) {
		return "", fmt.Errorf("voters %d → %d", len(before.Voters), len(after.Voters))
	}
	now := p.answers(ctx, http.StatusBadRequest)
	if now <= counted {
		return "", fmt.Errorf("400 answers counted %v → %v", counted, now)
	}
	return fmt.Sprintf("%d %s (400 answers counted %v → %v); still %d voters", status, trimAnswer(answer), counted, now, len(after.Voters)), nil
}

func (p *prober) hugeWindow(ctx context.Context) (string, error) {
	counted := p.answers(ctx, http.StatusBadRequest)
	body := fmt.Sprintf(`{"name": "probe-window", "steps": 1, "window": %d, "shard_spec": {"world_size": 1}, "ir": {"name": "x", "tensors": [], "nodes": [], "execution_order": []}}`, uint64(math.MaxUint64))
	status, answer, err := p.post(ctx, "/v1/jobs", bytes.NewReader([]byte(body)))
	if err != nil {
		return "", err
	}
	if status != http.StatusBadRequest || !strings.Contains(answer, "window") {
		return "", fmt.Errorf("window 2^64-1: %d %s", status, answer)
	}
	if _, err := p.api.Job(ctx, "probe-window"); !errors.Is(err, api.ErrNotFound) {
		return "", fmt.Errorf("job probe-window: %v, want not found", err)
	}
	now := p.answers(ctx, http.StatusBadRequest)
	if now <= counted {
		return "", fmt.Errorf("400 answers counted %v → %v", counted, now)
	}
	return fmt.Sprintf("%d %s (400 answers counted %v → %v); no job probe-window", status, trimAnswer(answer), counted, now), nil
}

func (p *prober) tokenlessReads(ctx context.Context) (string, error) {
	const unauthorized = "tmmu_coordinator_unauthorized_requests_total"
	before := p.sum(ctx, unauthorized, "")
	var refused []string
	for _, path := range []string{"/v1/jobs", "/v1/status", "/v1/jobs/" + p.t.Job, "/v1/jobs/" + p.t.Job + "/ir", "/v1/jobs/" + p.t.Job + "/ranks/0/plan",
		"/v1/datasets", "/v1/manifests/" + strings.Repeat("0", 64) + "/files/0?off=0&len=1"} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.t.Coordinators[0]+path, nil)
		resp, err := p.t.HTTP.Do(req)
		if err != nil {
			return "", err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			return "", fmt.Errorf("GET %s without a token: %s", path, resp.Status)
		}
		refused = append(refused, path)
	}
	after := p.sum(ctx, unauthorized, "")
	if after < before+float64(len(refused)) {
		return "", fmt.Errorf("%s counted %v → %v for %d refusals", unauthorized, before, after, len(refused))
	}
	return fmt.Sprintf("401 for %s (%s %v → %v)", strings.Join(refused, ", "), unauthorized, before, after), nil
}

// dataStore opens the datasets and weights store (the object store
// bucket behind transport.DataStream) as the identity, around the
// coordinators' range reads: JetStream must not answer at all (an
// answer, even "bucket not found", means the identity may read it).
func (p *prober) dataStore(ctx context.Context) (string, error) {
	c, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	bucket := strings.TrimPrefix(transport.DataStream, "OBJ_")
	o, err := p.js.ObjectStore(c, bucket)
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound):
		return "", fmt.Errorf("JetStream answered for the %s stream (the bucket does not exist yet): this identity may read it", transport.DataStream)
	case err != nil:
		return fmt.Sprintf("opening bucket %s: %v", bucket, err), nil
	}
	if _, err := o.List(c); err == nil || errors.Is(err, jetstream.ErrNoObjectsFound) {
		return "", fmt.Errorf("listed the objects of bucket %s", bucket)
	}
	return "", fmt.Errorf("opened bucket %s", bucket)
}
