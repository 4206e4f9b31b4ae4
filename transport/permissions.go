package transport

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/tmmu/tmmu/trust"
)

// Permissions are what a NATS user may publish and subscribe to
// (nats-server's authorization permissions: allow lists, and deny lists
// that win over them).
type Permissions struct {
	PublishAllow   []string `json:"publish_allow"`
	PublishDeny    []string `json:"publish_deny,omitempty"`
	SubscribeAllow []string `json:"subscribe_allow"`
	SubscribeDeny  []string `json:"subscribe_deny,omitempty"`
}

// checkpointStream and the KV streams are the JetStream streams a worker
// reads and writes (through the bucket APIs).
const checkpointStream = "OBJ_tmmu_checkpoints"

// DataStream is the stream behind the object store of datasets and
// weights (datastore.Bucket). Workers have no access to it: they read
// what their jobs name in ranges from the coordinators' API.
const DataStream = "OBJ_tmmu_data"

// workerStreams are the streams behind the buckets a worker uses.
var workerStreams = []string{"KV_" + Bucket, "KV_" + StepsBucket, "KV_" + ProgressBucket, "KV_" + CollectiveBucket, "KV_" + CheckpointBucket, checkpointStream}

// WorkerPermissions returns the NATS permissions of a worker identity:
//
//   - writes: only the KV keys that end in its own IdentityToken — its
//     plan reports, step reports, progress, checkpoint reports and
//     collective contributions — and its replan and recovery requests on
//     "tmmu.<job>.replan.<token>" and "tmmu.<job>.recover.<token>"; and
//     the checkpoint object store's chunks and metadata (objects are
//     named by their SHA-256, which readers check);
//   - JetStream: reading the buckets (stream info, direct and message
//     gets, ephemeral consumers with flow control on those streams) —
//     not the datasets and weights store (DataStream), which workers
//     read through the coordinators — and nothing else: no stream is created, changed, purged, deleted,
//     mirrored or sourced, so nothing can be republished into the
//     coordinators' subjects;
//   - reads: the coordinators' outcomes and announcements, and replies
//     on its inbox.
//
// It cannot publish outcomes or announcements (and workers verify their
// signatures besides, see WithVerifier).
func WorkerPermissions(identity string) Permissions {
	tok := IdentityToken(identity)
	p := Permissions{
		PublishAllow: []string{
			"$KV." + Bucket + ".*.*.*." + tok,
			"$KV." + StepsBucket + ".*.*.*." + tok,
			"$KV." + ProgressBucket + ".*." + tok,
			"$KV." + CheckpointBucket + ".*.*.*.*." + tok,
			"$KV." + CollectiveBucket + ".*.*.*.*." + tok,
			SubjectPrefix + ".*.replan." + tok,
			SubjectPrefix + ".*.recover." + tok,
			"$O.tmmu_checkpoints.C.>",
			"$O.tmmu_checkpoints.M.>",
			"$JS.API.INFO",
		},
		SubscribeAllow: []string{"_INBOX.>", SubjectPrefix + ".*.outcome", SubjectPrefix + ".*.announce"},
	}
	for _, s := range workerStreams {
		p.PublishAllow = append(p.PublishAllow,
			"$JS.API.STREAM.INFO."+s,
			"$JS.API.STREAM.MSG.GET."+s,
			"$JS.API.DIRECT.GET."+s,
			"$JS.API.DIRECT.GET."+s+".>",
			"$JS.API.CONSUMER.CREATE."+s,
			"$JS.API.CONSUMER.CREATE."+s+".>",
			"$JS.API.CONSUMER.INFO."+s+".*",
			"$JS.API.CONSUMER.DELETE."+s+".*",
			"$JS.API.CONSUMER.MSG.NEXT."+s+".*",
			"$JS.FC."+s+".>",
			"$JS.ACK."+s+".>",
		)
	}
	return p
}

// CoordinatorPermissions returns the NATS permissions of a coordinator:
// everything (coordinators create the buckets, commit and announce, and
// collect garbage).
func CoordinatorPermissions() Permissions {
	return Permissions{PublishAllow: []string{">"}, SubscribeAllow: []string{">"}}
}

// NATSUser is one NATS user of a tmmu cluster: its public nkey and
// permissions, and a comment saying whose it is.
type NATSUser struct {
	Nkey        string
	Permissions Permissions
	Comment     string
}

// NATSAuthorizationOf renders the NATS users trust.Generate found in a
// credentials layout (its natsAuth callback): coordinators with
// CoordinatorPermissions, each worker with its WorkerPermissions.
func NATSAuthorizationOf(users []trust.NATSUser) ([]byte, error) {
	out := make([]NATSUser, 0, len(users))
	for _, u := range users {
		p := WorkerPermissions(u.ID)
		if u.Role == trust.RoleCoordinator {
			p = CoordinatorPermissions()
		}
		out = append(out, NATSUser{Nkey: u.Nkey, Permissions: p, Comment: u.Role + " " + u.ID})
	}
	return NATSAuthorization(out), nil
}

// NATSAuthorization renders users as a nats-server configuration block
// ("authorization { users = [...] }", to include from nats.conf).
func NATSAuthorization(users []NATSUser) []byte {
	var b bytes.Buffer
	b.WriteString("# Written by tmmu secrets: one NATS user per identity, each with its own nkey.\n")
	b.WriteString("authorization {\n  users = [\n")
	list := func(name string, subjects []string) {
		if len(subjects) == 0 {
			return
		}
		q := make([]string, len(subjects))
		for i, s := range subjects {
			q[i] = strconv.Quote(s)
		}
		fmt.Fprintf(&b, "        %s: [%s]\n", name, strings.Join(q, ", "))
	}
	for _, u := range users {
		if u.Comment != "" {
			fmt.Fprintf(&b, "    # %s\n", u.Comment)
		}
		fmt.Fprintf(&b, "    {\n      nkey: %s\n      permissions: {\n      publish: {\n", u.Nkey)
		list("allow", u.Permissions.PublishAllow)
		list("deny", u.Permissions.PublishDeny)
		b.WriteString("      }\n      subscribe: {\n")
		list("allow", u.Permissions.SubscribeAllow)
		list("deny", u.Permissions.SubscribeDeny)
		b.WriteString("      }\n      }\n    }\n")
	}
	b.WriteString("  ]\n}\n")
	return b.Bytes()
}
