package transport

import (
	"strconv"
	"strings"
)

// SubjectPrefix is the first token of every subject this package uses.
const SubjectPrefix = "tmmu"

// Bucket is the JetStream key-value bucket that holds plan reports, one key
// per (job, epoch, rank): "<job>.<epoch>.<rank>", epoch and rank in decimal.
const Bucket = "tmmu_agree"

// bucketStream is the stream behind Bucket (the KV naming convention).
const bucketStream = "KV_" + Bucket

// bucketSubjectPrefix is the subject prefix of Bucket's keys in its stream.
const bucketSubjectPrefix = "$KV." + Bucket + "."

func subject(job, kind string) (string, error) {
	if err := ValidJob(job); err != nil {
		return "", err
	}
	return SubjectPrefix + "." + job + "." + kind, nil
}

// OutcomeSubject returns "tmmu.<job>.outcome", where the leader publishes
// Outcome messages.
func OutcomeSubject(job string) (string, error) { return subject(job, "outcome") }

// ReplanSubject returns "tmmu.<job>.replan", where workers publish
// ReplanRequest messages.
func ReplanSubject(job string) (string, error) { return subject(job, "replan") }

// AnnounceSubject returns "tmmu.<job>.announce", where the leader publishes
// Announcement messages.
func AnnounceSubject(job string) (string, error) { return subject(job, "announce") }

// RecoverSubject returns "tmmu.<job>.recover", where workers publish
// RecoveryRequest messages.
func RecoverSubject(job string) (string, error) { return subject(job, "recover") }

// ReportKey returns the KV key of (job, epoch, rank) in Bucket:
// "<job>.<epoch>.<rank>".
func ReportKey(job string, epoch, rank uint64) (string, error) {
	if err := ValidJob(job); err != nil {
		return "", err
	}
	return reportKey(job, epoch, rank), nil
}

func reportKey(job string, epoch, rank uint64) string {
	var b strings.Builder
	b.Grow(len(job) + 42)
	b.WriteString(job)
	b.WriteByte('.')
	b.WriteString(strconv.FormatUint(epoch, 10))
	b.WriteByte('.')
	b.WriteString(strconv.FormatUint(rank, 10))
	return b.String()
}

// epochFilter returns the KV key filter "<job>.<epoch>.*".
func epochFilter(job string, epoch uint64) string {
	return job + "." + strconv.FormatUint(epoch, 10) + ".*"
}

// parseKey splits "<job>.<epoch>.<rank>"; ok is false for anything else,
// including non-canonical decimals ("01").
func parseKey(key string) (job string, epoch, rank uint64, ok bool) {
	job, rest, ok1 := strings.Cut(key, ".")
	es, rs, ok2 := strings.Cut(rest, ".")
	if !ok1 || !ok2 {
		return "", 0, 0, false
	}
	var err error
	if epoch, err = strconv.ParseUint(es, 10, 64); err != nil || strconv.FormatUint(epoch, 10) != es {
		return "", 0, 0, false
	}
	if rank, err = strconv.ParseUint(rs, 10, 64); err != nil || strconv.FormatUint(rank, 10) != rs {
		return "", 0, 0, false
	}
	return job, epoch, rank, true
}
