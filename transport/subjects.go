package transport

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// SubjectPrefix is the first token of every subject this package uses.
const SubjectPrefix = "tmmu"

// Bucket is the JetStream key-value bucket that holds plan reports, one key
// per (job, epoch, rank, identity): "<job>.<epoch>.<rank>.<token>", epoch
// and rank in decimal, token the reporter's IdentityToken.
const Bucket = "tmmu_agree"

// bucketStream is the stream behind Bucket (the KV naming convention).
const bucketStream = "KV_" + Bucket

// bucketSubjectPrefix is the subject prefix of Bucket's keys in its stream.
const bucketSubjectPrefix = "$KV." + Bucket + "."

// IdentityToken returns the token that names a worker identity in KV keys
// and subjects: the first 12 bytes of the identity's SHA-256, in hex (24
// characters from [0-9a-f], so always one subject token). The NATS
// permissions a worker identity gets (WorkerPermissions) let it write
// only keys and subjects that carry its own token, so a report under a
// token comes from that identity's credentials.
func IdentityToken(identity string) string {
	h := sha256.Sum256([]byte(identity))
	return hex.EncodeToString(h[:12])
}

// tokenLen is the length of an IdentityToken.
const tokenLen = 24

func subject(job, kind string) (string, error) {
	if err := ValidJob(job); err != nil {
		return "", err
	}
	return SubjectPrefix + "." + job + "." + kind, nil
}

// OutcomeSubject returns "tmmu.<job>.outcome", where the leader publishes
// Outcome messages.
func OutcomeSubject(job string) (string, error) { return subject(job, "outcome") }

// ReplanSubject returns "tmmu.<job>.replan", below which workers publish
// ReplanRequest messages, each on "tmmu.<job>.replan.<token>" of its
// identity.
func ReplanSubject(job string) (string, error) { return subject(job, "replan") }

// AnnounceSubject returns "tmmu.<job>.announce", where the leader publishes
// Announcement messages.
func AnnounceSubject(job string) (string, error) { return subject(job, "announce") }

// RecoverSubject returns "tmmu.<job>.recover", below which workers
// publish RecoveryRequest messages, each on "tmmu.<job>.recover.<token>"
// of its identity.
func RecoverSubject(job string) (string, error) { return subject(job, "recover") }

// ReportKey returns the KV key of identity's report for (job, epoch,
// rank) in Bucket: "<job>.<epoch>.<rank>.<token>".
func ReportKey(job string, epoch, rank uint64, identity string) (string, error) {
	if err := ValidJob(job); err != nil {
		return "", err
	}
	return reportKey(job, epoch, rank, identity), nil
}

func reportKey(job string, epoch, rank uint64, identity string) string {
	var b strings.Builder
	b.Grow(len(job) + 43 + tokenLen)
	b.WriteString(job)
	b.WriteByte('.')
	b.WriteString(strconv.FormatUint(epoch, 10))
	b.WriteByte('.')
	b.WriteString(strconv.FormatUint(rank, 10))
	b.WriteByte('.')
	b.WriteString(IdentityToken(identity))
	return b.String()
}

// epochFilter returns the KV key filter "<job>.<epoch>.*.*".
func epochFilter(job string, epoch uint64) string {
	return job + "." + strconv.FormatUint(epoch, 10) + ".*.*"
}

// parseKey splits "<job>.<epoch>.<rank>.<token>"; ok is false for
// anything else, including non-canonical decimals ("01").
func parseKey(key string) (job string, epoch, rank uint64, token string, ok bool) {
	f := strings.Split(key, ".")
	if len(f) != 4 {
		return "", 0, 0, "", false
	}
	var err error
	if epoch, err = strconv.ParseUint(f[1], 10, 64); err != nil || strconv.FormatUint(epoch, 10) != f[1] {
		return "", 0, 0, "", false
	}
	if rank, err = strconv.ParseUint(f[2], 10, 64); err != nil || strconv.FormatUint(rank, 10) != f[2] {
		return "", 0, 0, "", false
	}
	return f[0], epoch, rank, f[3], true
}

// keyOrder orders KV keys field by field, numeric fields as numbers
// (rank 2 before rank 10).
func keyOrder(a, b string) int {
	fa, fb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(fa) && i < len(fb); i++ {
		if fa[i] == fb[i] {
			continue
		}
		na, ea := strconv.ParseUint(fa[i], 10, 64)
		nb, eb := strconv.ParseUint(fb[i], 10, 64)
		if ea == nil && eb == nil {
			if na < nb {
				return -1
			}
			return 1
		}
		return strings.Compare(fa[i], fb[i])
	}
	return len(fa) - len(fb)
}
