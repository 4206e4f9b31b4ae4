package main

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tmmu/tmmu/localcluster"
)

// BenchmarkDataPut stores a token file with tmmu data put in a secured
// in-process cluster (NATS with JetStream on file storage, three
// coordinators, TLS and the API token) and reports the bytes a second:
// each file is streamed to a coordinator, cut into blocks stored in the
// object store, then read back through its blocks and scanned before it
// is named. $TMMU_BENCH_PUT_MB sets the file's size (default 64 MiB):
//
//	TMMU_BENCH_PUT_MB=1024 go test ./cmd/tmmu -run '^$' -bench DataPut -benchtime 1x
func BenchmarkDataPut(b *testing.B) {
	mb := 64
	if s := os.Getenv("TMMU_BENCH_PUT_MB"); s != "" {
		var err error
		if mb, err = strconv.Atoi(s); err != nil || mb <= 0 {
			b.Fatalf("TMMU_BENCH_PUT_MB=%q", s)
		}
	}
	dir := b.TempDir()
	file := filepath.Join(dir, "tokens.bin")
	f, err := os.Create(file)
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	x := uint64(1)
	for range mb {
		for i := 0; i < len(buf); i += 2 {
			x = x*6364136223846793005 + 1442695040888963407
			binary.LittleEndian.PutUint16(buf[i:], uint16(x>>33)%50257)
		}
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	f.Close()
	l, err := localcluster.Start(localcluster.Options{Dir: filepath.Join(dir, "cluster")})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	b.Setenv("TMMU_CA_FILE", l.CAFile())
	b.Setenv("TMMU_TOKEN", l.APIToken())
	urls := strings.Join(l.Coord.URLs(), ",")
	b.SetBytes(int64(mb) << 20)
	b.ResetTimer()
	for i := range b.N {
		var out, errOut bytes.Buffer
		if code := run(&env{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut}, []string{"data", "put", "toks" + strconv.Itoa(i), file, "--coordinators", urls}); code != 0 {
			b.Fatalf("data put: exit %d\n%s", code, errOut.String())
		}
		b.Log(strings.TrimSpace(out.String()))
	}
}
