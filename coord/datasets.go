package coord

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strconv"

	"github.com/tmmu/tmmu/checkpoint"
	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/datastore"
	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/safetensors"
	"github.com/tmmu/tmmu/weights"
)

// SetDataStore sets the store of datasets and weights (the object store
// bucket datastore.Bucket), once NATS is up.
func (n *Node) SetDataStore(s checkpoint.Store) {
	n.dataReader.Store(datastore.NewReader(s, cmp.Or(n.cfg.DataCacheBytes, DefaultDataCacheBytes)))
	n.dataStore.Store(&s)
}

// SetCheckpointStore sets the checkpoint store the API reads checkpoint
// shards from (tmmu job export), once NATS is up.
func (n *Node) SetCheckpointStore(s checkpoint.Store) { n.ckptStore.Store(&s) }

// ErrNoDataStore is returned while the node has no data store (NATS is
// not up yet).
var ErrNoDataStore = errors.New("coord: the data store is not open yet (NATS)")

func (n *Node) datastore() (*datastore.Store, checkpoint.Store, error) {
	p := n.dataStore.Load()
	if p == nil {
		return nil, nil, ErrNoDataStore
	}
	return datastore.New(*p), *p, nil
}

// MaxFileBytes bounds one file of a dataset (POST /v1/files).
const MaxFileBytes = 1 << 40

// dataHandlers registers the data API:
//
//	POST   /v1/files?name=N     a file's bytes (streamed), stored as blocks: its FileRef
//	PUT    /v1/datasets/{name}  {format, files, labels}: scan and name a dataset (or weights file)
//	GET    /v1/datasets         the named datasets
//	GET    /v1/datasets/{name}  one dataset's manifest
//	DELETE /v1/datasets/{name}  remove a name and collect what nothing holds (?force=1: even if a live job pinned it)
//	GET    /v1/manifests/{digest}
//	                            a stored manifest (its CBOR, which hashes to digest)
//	GET    /v1/manifests/{digest}/files/{i}?off=O&len=N
//	                            bytes [O, O+N) of its file i (files, then label files):
//	                            the workers' range reads, N ≤ datastore.MaxRead
//	GET    /v1/jobs/{name}/checkpoints/{step}/shards/{rank}
//	                            a committed checkpoint's shard (its CBOR object)
func (n *Node) dataHandlers(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/files", n.authorized(func(w http.ResponseWriter, r *http.Request) {
		s, _, err := n.datastore()
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, err)
			return
		}
		name := path.Base(r.URL.Query().Get("name"))
		ref, err := s.PutFile(r.Context(), name, http.MaxBytesReader(w, r.Body, MaxFileBytes))
		if err != nil {
			writeError(w, storeStatus(err), err)
			return
		}
		writeJSON(w, http.StatusCreated, ref)
	}))
	mux.HandleFunc("PUT /v1/datasets/{name}", n.authorized(func(w http.ResponseWriter, r *http.Request) {
		s, _, err := n.datastore()
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, err)
			return
		}
		var req datastore.Request
		if !decodeBody(w, r, 64<<20, "dataset", &req) {
			return
		}
		m, d, err := s.Commit(r.Context(), r.PathValue("name"), req)
		if err != nil {
			writeError(w, storeStatus(err), err)
			return
		}
		writeJSON(w, http.StatusCreated, datastore.Entry{Name: m.Name, Manifest: d, M: m})
	}))
	mux.HandleFunc("GET /v1/datasets", n.readable(func(w http.ResponseWriter, r *http.Request) {
		s, _, err := n.datastore()
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, err)
			return
		}
		list, err := s.List(r.Context())
		if err != nil {
			writeError(w, storeStatus(err), err)
			return
		}
		if list == nil {
			list = []datastore.Entry{}
		}
		writeJSON(w, http.StatusOK, list)
	}))
	mux.HandleFunc("GET /v1/datasets/{name}", n.readable(func(w http.ResponseWriter, r *http.Request) {
		s, _, err := n.datastore()
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, err)
			return
		}
		m, d, err := s.Resolve(r.Context(), r.PathValue("name"))
		if err != nil {
			writeError(w, storeStatus(err), err)
			return
		}
		writeJSON(w, http.StatusOK, datastore.Entry{Name: m.Name, Manifest: d, M: m})
	}))
	mux.HandleFunc("DELETE /v1/datasets/{name}", n.authorized(func(w http.ResponseWriter, r *http.Request) {
		s, _, err := n.datastore()
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, err)
			return
		}
		name := r.PathValue("name")
		_, d, err := s.Resolve(r.Context(), name)
		if err != nil {
			writeError(w, storeStatus(err), err)
			return
		}
		keep, users := n.pinned(d)
		if len(users) > 0 && r.URL.Query().Get("force") != "1" {
			writeError(w, http.StatusConflict, failure.New(failure.InvalidOptions, api.OpCoordinator,
				fmt.Sprintf("dataset %s is read by running jobs %v: its blocks stay while they run; remove it anyway with force", name, users), "dataset", name))
			return
		}
		objs, bytes, err := s.Remove(r.Context(), name, keep)
		if err != nil {
			writeError(w, storeStatus(err), err)
			return
		}
		writeJSON(w, http.StatusOK, api.DataRemoved{Name: name, Objects: objs, Bytes: bytes, PinnedBy: users})
	}))
	mux.HandleFunc("GET /v1/manifests/{digest}", n.readable(func(w http.ResponseWriter, r *http.Request) {
		_, m, ok := n.manifest(w, r)
		if !ok {
			return
		}
		b, _, err := m.Encode()
		if err != nil {
			writeError(w, http.StatusInternalServerError, err)
			return
		}
		w.Header().Set("Content-Type", "application/cbor")
		w.Write(b)
	}))
	mux.HandleFunc("GET /v1/manifests/{digest}/files/{i}", n.readable(func(w http.ResponseWriter, r *http.Request) {
		rd, m, ok := n.manifest(w, r)
		if !ok {
			return
		}
		q := r.URL.Query()
		i, err1 := strconv.Atoi(r.PathValue("i"))
		off, err2 := strconv.ParseUint(q.Get("off"), 10, 64)
		size, err3 := strconv.ParseUint(q.Get("len"), 10, 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			writeError(w, http.StatusBadRequest, failure.New(failure.InvalidOptions, api.OpCoordinator, "a range read names a file index, ?off= and ?len= (decimal): "+err.Error()))
			return
		}
		b, err := rd.ReadRange(r.Context(), m, i, off, size)
		if err != nil {
			writeError(w, storeStatus(err), err)
			return
		}
		n.metrics.dataServed.Add(float64(len(b)))
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(b)
	}))
	mux.HandleFunc("GET /v1/jobs/{name}/checkpoints/{step}/shards/{rank}", n.readable(func(w http.ResponseWriter, r *http.Request) {
		j := n.job(w, r)
		if j == nil {
			return
		}
		step, err1 := strconv.ParseUint(r.PathValue("step"), 10, 64)
		rank, err2 := strconv.ParseUint(r.PathValue("rank"), 10, 64)
		c := j.Checkpoint(step)
		if err1 != nil || err2 != nil || c == nil || rank >= uint64(len(c.Shards)) {
			writeError(w, http.StatusNotFound, fmt.Errorf("job %q has no committed checkpoint shard %s/%s", j.Spec.Name, r.PathValue("step"), r.PathValue("rank")))
			return
		}
		p := n.ckptStore.Load()
		if p == nil {
			writeError(w, http.StatusServiceUnavailable, errors.New("coord: the checkpoint store is not open yet (NATS)"))
			return
		}
		sh := c.Shards[rank]
		b, err := (*p).Get(r.Context(), checkpoint.ObjectName(j.Spec.Name, step, rank, sh.Digest))
		if err != nil {
			writeError(w, storeStatus(err), err)
			return
		}
		w.Header().Set("Content-Type", "application/cbor")
		w.Write(b)
	}))
}

// manifest resolves the {digest} of a request to its manifest, read
// through the node's reader (or answers the error and returns false).
func (n *Node) manifest(w http.ResponseWriter, r *http.Request) (*datastore.Reader, *datastore.Manifest, bool) {
	rd := n.dataReader.Load()
	if rd == nil {
		writeError(w, http.StatusServiceUnavailable, ErrNoDataStore)
		return nil, nil, false
	}
	d, err := ir.ParseHash(r.PathValue("digest"))
	if err != nil {
		writeError(w, http.StatusBadRequest, failure.New(failure.InvalidOptions, api.OpCoordinator, "manifest digest: "+err.Error()))
		return nil, nil, false
	}
	m, err := rd.Manifest(r.Context(), d)
	if err != nil {
		writeError(w, storeStatus(err), err)
		return nil, nil, false
	}
	return rd, m, true
}

// storeStatus is the HTTP status of a data store error.
func storeStatus(err error) int {
	switch {
	case errors.Is(err, datastore.ErrNotFound), errors.Is(err, checkpoint.ErrNotFound):
		return http.StatusNotFound
	case failure.CodeOf(err) == failure.CheckpointStoreFull:
		return http.StatusInsufficientStorage
	case failure.CodeOf(err) != "":
		return http.StatusBadRequest
	}
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusServiceUnavailable
}

// pinned returns the manifests the jobs that are not over pinned, and the
// names of those that pinned d.
func (n *Node) pinned(d ir.Hash) (keep []ir.Hash, users []string) {
	s, _ := n.State()
	for _, name := range s.Names() {
		j := s.Jobs[name]
		if j.Final() {
			continue
		}
		for _, ref := range j.Spec.DataRefs() {
			if ref.Stored() {
				keep = append(keep, ref.Manifest)
				if ref.Manifest == d {
					users = append(users, name)
				}
			}
		}
	}
	return keep, users
}

// resolveData pins the stored datasets and weights a submission names to
// their manifests, filling in what the manifests say (format, digest,
// length, largest token).
func (n *Node) resolveData(ctx context.Context, req *api.SubmitRequest) error {
	var refs []*api.DataRef
	if req.Data != nil {
		refs = append(refs, &req.Data.Train)
		if req.Data.Val != nil {
			refs = append(refs, req.Data.Val)
		}
	}
	if req.Weights != nil {
		refs = append(refs, req.Weights)
	}
	for _, ref := range refs {
		if !ref.Stored() {
			continue
		}
		if ref.Name == "" {
			return failure.New(failure.InvalidOptions, api.OpCoordinator, "a dataset reference names a stored dataset or file:// URLs")
		}
		s, _, err := n.datastore()
		if err != nil {
			return err
		}
		m, d, err := s.Resolve(ctx, ref.Name)
		if err != nil {
			if errors.Is(err, datastore.ErrNotFound) {
				return failure.New(failure.InvalidDataset, api.OpCoordinator, err.Error(), "dataset", ref.Name)
			}
			return err
		}
		ref.Manifest, ref.Format, ref.Digest, ref.Kind, ref.Len, ref.MaxToken, ref.Sample = d, m.Format, m.Digest, m.Kind, m.Len, m.MaxToken, m.SampleShape
	}
	return nil
}

// checkWeights reads the header of a job's stored weights and checks it
// against the global IR (every parameter present, of its shape, of a
// float type): INVALID_WEIGHTS naming each culprit, before anything is
// committed. Mounted weights are checked by the submitter.
func (n *Node) checkWeights(ctx context.Context, ref *api.DataRef, m *ir.Model) error {
	if ref == nil || !ref.Stored() {
		return nil
	}
	if ref.Kind != datastore.KindWeights {
		return failure.New(failure.InvalidWeights, api.OpCoordinator, fmt.Sprintf("%s is a %s dataset, not a weights file (store one with tmmu data put NAME FILE.safetensors)", ref.Name, ref.Kind), "weights", ref.Name)
	}
	_, objs, err := n.datastore()
	if err != nil {
		return err
	}
	g, err := ir.Compile(m)
	if err != nil {
		return err
	}
	rd := datastore.NewReader(objs, 0)
	man, err := rd.Manifest(ctx, ref.Manifest)
	if err != nil {
		return err
	}
	files, _ := rd.Sources(ctx, man)
	f, err := safetensors.Open(files[0], files[0].Size())
	if err != nil {
		return err
	}
	return weights.Check(f, g)
}
