package transport

import (
	"context"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/tmmu/tmmu/internal/natstest"
)

// authServer runs nats-server from a configuration that includes the
// rendered NATSAuthorization of a coordinator and two workers, as `tmmu
// secrets` writes it for the compose cluster; it returns the server and
// each identity's nkey seed.
func authServer(t *testing.T) (*server.Server, map[string][]byte) {
	t.Helper()
	seeds := map[string][]byte{}
	var users []NATSUser
	for _, id := range []string{"coordinator", "w0", "w1"} {
		kp, err := nkeys.CreateUser()
		if err != nil {
			t.Fatal(err)
		}
		seed, _ := kp.Seed()
		pub, _ := kp.PublicKey()
		seeds[id] = seed
		perms := WorkerPermissions(id)
		if id == "coordinator" {
			perms = CoordinatorPermissions()
		}
		users = append(users, NATSUser{Nkey: pub, Permissions: perms, Comment: id})
	}
	dir := t.TempDir()
	auth := filepath.Join(dir, "auth.conf")
	if err := os.WriteFile(auth, NATSAuthorization(users), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(conf, []byte("jetstream { store_dir: "+filepath.Join(dir, "js")+" }\ninclude auth.conf\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	o.Host, o.Port, o.NoLog, o.NoSigs = "127.0.0.1", -1, true, true
	return natstest.Start(t, o), seeds
}

// connectAs connects with an identity's nkey; permission errors go to
// the returned channel.
func connectAs(t *testing.T, s *server.Server, seed []byte) (*nats.Conn, chan error) {
	t.Helper()
	kp, err := nkeys.FromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	errs := make(chan error, 64)
	nc, err := nats.Connect(s.ClientURL(), nats.Nkey(pub, func(nonce []byte) ([]byte, error) { return kp.Sign(nonce) }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc, errs
}

// TestWorkerPermissions: with the rendered authorization, a worker writes
// its own reports, steps, progress, checkpoint reports and collectives;
// the server refuses it another identity's keys, outcomes and
// announcements, creating a stream (one that would republish into an
// announcement subject), purging or deleting one, and creating a bucket.
func TestWorkerPermissions(t *testing.T) {
	s, seeds := authServer(t)
	ctx := testCtx(t)
	cnc, _ := connectAs(t, s, seeds["coordinator"])
	if _, err := New(cnc); err != nil { // the coordinator creates the buckets
		t.Fatal(err)
	}
	wnc, werrs := connectAs(t, s, seeds["w0"])
	w, err := New(wnc, OpenOnly(), WithIdentity("w0"), WithTimeout(5*time.Second))
	if err != nil {
		t.Fatalf("a worker opens the buckets: %v", err)
	}
	h := hashOf("plan")
	if err := w.Report(ctx, PlanReport{Job: "j", Epoch: 0, Rank: 0, Identity: "w0", PlanHash: h}); err != nil {
		t.Fatalf("own report: %v", err)
	}
	if err := w.PutStep(ctx, StepReport{Job: "j", Rank: 0, Step: 1, PlanHash: h, Identity: "w0"}); err != nil {
		t.Fatalf("own step: %v", err)
	}
	if err := w.PutProgress(ctx, StepDone{Job: "j", Rank: 0, Step: 1, Identity: "w0"}); err != nil {
		t.Fatalf("own progress: %v", err)
	}
	if err := w.PutCheckpoint(ctx, CheckpointReport{Job: "j", Step: 1, Rank: 0, Identity: "w0", Digest: h}); err != nil {
		t.Fatalf("own checkpoint report: %v", err)
	}
	g, err := w.NewGroup("j", 0, 1, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := g.Exchange(ctx, "k", []byte("x")); err != nil || string(out[0]) != "x" {
		t.Fatalf("own collective: %q, %v", out, err)
	}
	g.Close()

	// Another identity's keys, written around the transport's own checks.
	js, _ := jetstream.New(wnc)
	refused := func(what string, f func(context.Context) error) {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if err := f(c); err == nil {
			t.Errorf("%s: accepted", what)
		}
	}
	other := IdentityToken("w1")
	data, _ := Encode(PlanReport{Job: "j", Epoch: 0, Rank: 1, Identity: "w1", PlanHash: h})
	for _, k := range []struct{ bucket, key string }{
		{Bucket, "j.0.1." + other}, {StepsBucket, "j.0.1." + other}, {ProgressBucket, "j." + other},
		{CheckpointBucket, "j.1.0.1." + other}, {CollectiveBucket, "j.k.1.0." + other},
	} {
		kv, err := js.KeyValue(ctx, k.bucket)
		if err != nil {
			t.Fatal(err)
		}
		refused("put "+k.bucket+" "+k.key, func(c context.Context) error { _, err := kv.Put(c, k.key, data); return err })
	}
	refused("create a stream republishing into tmmu.j.announce", func(c context.Context) error {
		_, err := js.CreateStream(c, jetstream.StreamConfig{Name: "EVIL", Subjects: []string{"$KV.tmmu_agree.>.evil"},
			RePublish: &jetstream.RePublish{Source: ">", Destination: "tmmu.j.announce"}})
		return err
	})
	refused("create a stream mirroring the plan reports", func(c context.Context) error {
		_, err := js.CreateStream(c, jetstream.StreamConfig{Name: "MIRROR", Mirror: &jetstream.StreamSource{Name: "KV_" + Bucket}})
		return err
	})
	refused("update a bucket's stream to republish", func(c context.Context) error {
		_, err := js.UpdateStream(c, jetstream.StreamConfig{Name: "KV_" + Bucket, Subjects: []string{"$KV." + Bucket + ".>"},
			RePublish: &jetstream.RePublish{Source: ">", Destination: "tmmu.j.announce"}})
		return err
	})
	refused("purge the plan reports", func(c context.Context) error { return w.Forget(c, "j", 0) })
	refused("delete the progress bucket", func(c context.Context) error { return js.DeleteKeyValue(c, ProgressBucket) })
	refused("create a bucket", func(c context.Context) error {
		_, err := js.CreateKeyValue(c, jetstream.KeyValueConfig{Bucket: "evil"})
		return err
	})
	for _, subj := range []string{"tmmu.j.outcome", "tmmu.j.announce", "tmmu.j.replan." + other, "tmmu.j.recover." + other} {
		if err := wnc.Publish(subj, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	wnc.Flush()
	violations := 0
	for deadline := time.After(5 * time.Second); violations < 4; {
		select {
		case err := <-werrs:
			if strings.Contains(err.Error(), "Permissions Violation") {
				violations++
			}
		case <-deadline:
			t.Fatalf("%d permission violations for the 4 forbidden publishes", violations)
		}
	}
	// The datasets and weights store is the coordinators' alone: workers
	// read what their jobs name through the coordinators' API.
	cjs0, _ := jetstream.New(cnc)
	obs, err := cjs0.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: strings.TrimPrefix(DataStream, "OBJ_")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obs.PutBytes(ctx, "blocks/x", []byte("a dataset")); err != nil {
		t.Fatal(err)
	}
	refused("read the datasets store", func(c context.Context) error {
		o, err := js.ObjectStore(c, strings.TrimPrefix(DataStream, "OBJ_"))
		if err != nil {
			return err
		}
		_, err = o.GetBytes(c, "blocks/x")
		return err
	})
	// Nothing forged was stored.
	reps, err := New(cnc)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := reps.Reports(ctx, "j", 0); err != nil || len(got) != 1 || got[0].Identity != "w0" {
		t.Fatalf("stored reports %v, %v: want w0's only", got, err)
	}
	cjs, _ := jetstream.New(cnc)
	for _, name := range []string{"EVIL", "MIRROR", "KV_evil"} {
		if _, err := cjs.Stream(ctx, name); !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("stream %s: %v, want not found", name, err)
		}
	}
	if info, err := cjs.Stream(ctx, "KV_"+Bucket); err != nil || info.CachedInfo().Config.RePublish != nil {
		t.Fatalf("the plan reports' stream: %v, %v", info, err)
	}
}

type edSigner ed25519.PrivateKey

func (s edSigner) Sign(msg []byte) []byte { return ed25519.Sign(ed25519.PrivateKey(s), msg) }

type edVerifier ed25519.PublicKey

func (v edVerifier) Verify(msg, sig []byte) bool {
	return ed25519.Verify(ed25519.PublicKey(v), msg, sig)
}

// TestSignedDecisions: a verifying subscriber takes the coordinators'
// signed outcomes and announcements and drops (and counts) unsigned
// ones, ones signed with another key and ones changed after signing.
func TestSignedDecisions(t *testing.T) {
	s := startServer(t)
	pub, priv, _ := ed25519.GenerateKey(nil)
	_, evil, _ := ed25519.GenerateKey(nil)
	leader, _ := newTransport(t, s, WithSigner(edSigner(priv)))
	forger, _ := newTransport(t, s, WithSigner(edSigner(evil)))
	plain, _ := newTransport(t, s)
	w, wnc := newTransport(t, s, WithVerifier(edVerifier(pub)))
	got := make(chan Announcement, 8)
	sub, err := w.SubscribeAnnouncements("job", func(a Announcement) { got <- a })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	outs := make(chan Outcome, 8)
	osub, err := w.SubscribeOutcomes("job", func(o Outcome) { outs <- o })
	if err != nil {
		t.Fatal(err)
	}
	defer osub.Unsubscribe()
	wnc.Flush()

	grant := Announcement{Job: "job", Epoch: 0, Kind: KindGrant, StartStep: 18, Incarnation: 7}
	if err := plain.PublishAnnouncement(grant); err != nil { // unsigned
		t.Fatal(err)
	}
	if err := forger.PublishAnnouncement(grant); err != nil { // another key
		t.Fatal(err)
	}
	// Signed by the leader, then changed: a replay with a larger grant.
	signed := grant
	b, _ := signedBytes(&signed)
	signed.Sig = edSigner(priv).Sign(b)
	signed.StartStep = 5000
	raw, _ := Encode(signed)
	plain.nc.Publish("tmmu.job.announce", raw)
	if err := plain.PublishOutcome(Outcome{Job: "job", Agreed: true, Holders: []string{"w0"}}); err != nil {
		t.Fatal(err)
	}
	// The real ones.
	if err := leader.PublishAnnouncement(grant); err != nil {
		t.Fatal(err)
	}
	agreed := Outcome{Job: "job", Agreed: true, StartStep: 1, Holders: []string{"w0", "w1"}, Incarnation: 7}
	if err := leader.PublishOutcome(agreed); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-got:
		a.Sig = nil
		if !reflect.DeepEqual(a, grant) {
			t.Fatalf("delivered %+v, want the leader's grant", a)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the leader's grant did not arrive")
	}
	select {
	case o := <-outs:
		if len(o.Holders) != 2 {
			t.Fatalf("delivered %+v, want the leader's outcome", o)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the leader's outcome did not arrive")
	}
	// The publishers use four connections: their messages arrive in any
	// order.
	for deadline := time.Now().Add(10 * time.Second); w.Rejected() < 4 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if r := w.Rejected(); r != 4 {
		t.Fatalf("Rejected() = %d, want 4 (unsigned, wrong key, changed after signing, unsigned outcome)", r)
	}
	if len(got) != 0 {
		t.Fatalf("%d more announcements delivered", len(got))
	}
}
