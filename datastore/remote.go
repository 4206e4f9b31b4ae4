package datastore

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/tmmu/tmmu/data"
	"github.com/tmmu/tmmu/failure"
)

// RangeFunc reads bytes [off, off+n) of file i of a manifest (its
// files, then its label files), n at most MaxRead: fewer only at the
// file's end. A worker's is a coordinator's GET
// /v1/manifests/{digest}/files/{i} (api.Client.ReadFile).
type RangeFunc func(ctx context.Context, i int, off, n uint64) ([]byte, error)

// RemoteSources returns a manifest's files and label files as
// data.Sources that read exactly the ranges asked for through read,
// adding the bytes read returns to fetched.
func RemoteSources(ctx context.Context, m *Manifest, read RangeFunc, fetched *atomic.Uint64) (files, labels []data.Source) {
	for i, f := range m.Files {
		files = append(files, &remote{ctx: ctx, f: f, i: i, read: read, fetched: fetched})
	}
	for i, f := range m.Labels {
		labels = append(labels, &remote{ctx: ctx, f: f, i: len(m.Files) + i, read: read, fetched: fetched})
	}
	return files, labels
}

// remote is a stored file read in ranges.
type remote struct {
	ctx     context.Context
	f       FileRef
	i       int
	read    RangeFunc
	fetched *atomic.Uint64
}

func (r *remote) Size() int64  { return int64(r.f.Size) }
func (r *remote) Name() string { return r.f.Name }

// ReadAt reads [off, off+len(p)) in range reads of at most MaxRead.
func (r *remote) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("datastore: negative offset")
	}
	n := 0
	for n < len(p) {
		at := uint64(off) + uint64(n)
		if at >= r.f.Size {
			return n, io.EOF
		}
		want := min(uint64(len(p)-n), MaxRead, r.f.Size-at)
		b, err := r.read(r.ctx, r.i, at, want)
		if err != nil {
			return n, err
		}
		r.fetched.Add(uint64(len(b)))
		if uint64(len(b)) != want {
			return n, failure.New(failure.DatasetChanged, Operator, fmt.Sprintf("a read of %d bytes at %d of %s returned %d", want, at, r.f.Name, len(b)), "file", r.f.Name)
		}
		n += copy(p[n:], b)
	}
	return n, nil
}
