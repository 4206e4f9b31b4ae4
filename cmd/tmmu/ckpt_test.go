package main

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tmmu/tmmu/checkpoint"
)

var updateCheckpoints = flag.Bool("update-checkpoints", false, "regenerate testdata/bad/ckpt-corrupt and ckpt-mismatch")

// TestCheckpointFixtures regenerates, with -update-checkpoints, the two
// bad checkpoints the bad-input test resumes from: the micro model's
// checkpoint of step 2 with one byte flipped (its name keeps the digest:
// CHECKPOINT_CORRUPT), and one whose bytes are a valid shard but record
// another state hash than the state they hold (RESTORE_MISMATCH).
// Without the flag it checks that both are still what they claim to be.
func TestCheckpointFixtures(t *testing.T) {
	corrupt := filepath.Join("testdata", "bad", "ckpt-corrupt")
	mismatch := filepath.Join("testdata", "bad", "ckpt-mismatch")
	if *updateCheckpoints {
		dir := t.TempDir()
		if code, _, stderr := runCLI(t, "", "train", filepath.Join("testdata", "micro-train.json"), "--executor", "cpu", "--steps", "2", "--checkpoint-dir", dir); code != 0 {
			t.Fatal(stderr)
		}
		src, _ := checkpoint.NewDirStore(dir)
		objs, err := src.List(context.Background(), "")
		if err != nil || len(objs) != 1 {
			t.Fatalf("%v %v", objs, err)
		}
		data, _ := src.Get(context.Background(), objs[0].Name)
		os.RemoveAll(corrupt)
		os.RemoveAll(mismatch)
		bad := append([]byte(nil), data...)
		bad[len(bad)/2] ^= 0x01
		write(t, filepath.Join(corrupt, filepath.FromSlash(objs[0].Name)), bad)
		_, _, _, digest, _ := checkpoint.ParseName(objs[0].Name)
		s, err := checkpoint.Decode(data, digest)
		if err != nil {
			t.Fatal(err)
		}
		s.StateHash[0] ^= 0xff
		other, d, err := checkpoint.Encode(s)
		if err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(mismatch, filepath.FromSlash(checkpoint.ObjectName(trainJob, s.Step, 0, d))), other)
	}
	for _, dir := range []string{corrupt, mismatch} {
		st, _ := checkpoint.NewDirStore(dir)
		objs, err := st.List(context.Background(), "")
		if err != nil || len(objs) != 1 {
			t.Fatalf("%s: %v %v", dir, objs, err)
		}
		_, _, _, digest, _ := checkpoint.ParseName(objs[0].Name)
		data, _ := st.Get(context.Background(), objs[0].Name)
		_, err = checkpoint.Decode(data, digest)
		if strings.HasSuffix(dir, "corrupt") != (err != nil) {
			t.Errorf("%s: decoding: %v", dir, err)
		}
	}
}

func write(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
