package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tmmu/tmmu/datastore"
	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/shard"
)

// Client talks to a coordinator cluster's HTTP API. It tries the URLs in
// turn, so any live node answers reads, and follows a follower's redirect
// to the leader for writes.
type Client struct {
	URLs []string
	HTTP *http.Client
	// Token, when set, is sent as a bearer token with every request
	// (the coordinators' API token, which mutating calls need).
	Token string
	// Backoff says how requests are retried while no node answers or
	// none knows a leader (zero: DefaultBackoff).
	Backoff Backoff
}

// Backoff is a client's retry schedule: up to Rounds rounds over every
// URL, waiting Wait between rounds, doubled after each round up to Max
// (Max below Wait: Wait every time), each wait jittered by up to a
// quarter either way so that many workers do not retry in step; Submit
// asks about a submission still being planned every Poll.
type Backoff struct {
	Rounds    int
	Wait, Max time.Duration
	Poll      time.Duration
}

// DefaultBackoff rides through an election (about 2 s of 20 rounds) and
// polls a submission twice a second.
var DefaultBackoff = Backoff{Rounds: 20, Wait: 100 * time.Millisecond, Max: 100 * time.Millisecond, Poll: 500 * time.Millisecond}

// backoff is c.Backoff with DefaultBackoff's values for the zero fields
// (a zero Max: Wait every time).
func (c *Client) backoff() Backoff {
	b, d := c.Backoff, DefaultBackoff
	if b.Rounds <= 0 {
		b.Rounds = d.Rounds
	}
	if b.Wait <= 0 {
		b.Wait, b.Max = d.Wait, max(b.Max, d.Max)
	}
	if b.Poll <= 0 {
		b.Poll = d.Poll
	}
	return b
}

// wait returns the jittered wait after round k (from 0).
func (b Backoff) wait(k int) time.Duration {
	d := b.Wait
	for range k {
		if d >= b.Max {
			break
		}
		d = min(2*d, b.Max)
	}
	if q := int64(d / 4); q > 0 {
		d += time.Duration(rand.Int64N(2*q+1) - q)
	}
	return d
}

// NewClient returns a client for the given base URLs ("http://host:port").
func NewClient(urls ...string) *Client {
	return &Client{URLs: urls, HTTP: &http.Client{Timeout: 30 * time.Second, CheckRedirect: keepToken}}
}

// keepToken follows a follower's redirect to the leader with the API
// token: net/http drops Authorization on a redirect to another host, and
// the coordinators are other hosts.
func keepToken(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("coord: stopped after 10 redirects")
	}
	if a := via[0].Header.Get("Authorization"); a != "" {
		req.Header.Set("Authorization", a)
	}
	return nil
}

// ErrNotFound is returned for a job the cluster does not have (yet): the
// leader's answer, or every node's while none knows a leader.
var ErrNotFound = errors.New("coord: not found")

// ErrGone is returned for a job that was deleted (410): final.
var ErrGone = errors.New("coord: the job was deleted")

func (c *Client) do(ctx context.Context, method, path string, body []byte, out any) error {
	_, err := c.doStatus(ctx, method, path, body, out)
	return err
}

// doStatus is do, with the status of the answer that ended it. A node
// that answers 503 with Retry-After (busy, not down: the submission
// queue is full) is asked again after that wait for as long as ctx's
// deadline allows; those rounds do not count against Backoff.Rounds
// (without a deadline they do).
func (c *Client) doStatus(ctx context.Context, method, path string, body []byte, out any) (int, error) {
	b := c.backoff()
	_, deadline := ctx.Deadline()
	for counted := 0; ; {
		retry, status, after, err := c.once(ctx, method, path, body, out)
		if !retry {
			return status, err
		}
		var wait time.Duration
		if after > 0 && deadline {
			wait = max(b.wait(counted), after)
		} else {
			if counted++; counted >= b.Rounds {
				return status, err
			}
			wait = b.wait(counted - 1)
		}
		select {
		case <-ctx.Done():
			return status, err
		case <-time.After(wait):
		}
	}
}

// maxRetryAfter bounds the wait a Retry-After header asks for.
const maxRetryAfter = 30 * time.Second

// retryAfter reads a Retry-After header in seconds (0 when absent or
// not a number of seconds), at most maxRetryAfter.
func retryAfter(h http.Header) time.Duration {
	n, err := strconv.Atoi(h.Get("Retry-After"))
	if err != nil || n < 0 {
		return 0
	}
	return min(time.Duration(n)*time.Second, maxRetryAfter)
}

// once tries every URL once; retry says the failure may pass (a stale
// not-found included: the next round may reach a node that knows).
// status is the status of the answer it returns; after is the longest
// Retry-After a busy node asked for.
func (c *Client) once(ctx context.Context, method, path string, body []byte, out any) (retry bool, status int, after time.Duration, err error) {
	var last error
	for _, base := range c.URLs {
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
		if err != nil {
			return false, 0, 0, err
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		if c.Token != "" {
			req.Header.Set("Authorization", "Bearer "+c.Token)
		}
		resp, err := c.HTTP.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return false, 0, 0, ctx.Err()
			}
			last = err
			continue
		}
		status = resp.StatusCode
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			last = err
			continue
		}
		switch {
		case resp.StatusCode == http.StatusGone:
			return false, status, 0, fmt.Errorf("%w: %s", ErrGone, apiMessage(data))
		case resp.StatusCode == http.StatusNotFound && resp.Header.Get("X-Tmmu-Stale") != "":
			// A node that does not know the leader yet (it restarted)
			// answered from its own state: ask another.
			last = fmt.Errorf("%w: %s (a node without a leader answered)", ErrNotFound, apiMessage(data))
			continue
		case resp.StatusCode == http.StatusNotFound:
			return false, status, 0, fmt.Errorf("%w: %s", ErrNotFound, apiMessage(data))
		case resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode >= 500:
			after = max(after, retryAfter(resp.Header))
			last = fmt.Errorf("coord: %s %s: %s: %s", method, base+path, resp.Status, apiMessage(data))
			continue
		case resp.StatusCode >= 400:
			if fe := apiFailure(data); fe != nil {
				return false, status, 0, fe
			}
			return false, status, 0, fmt.Errorf("coord: %s: %s", resp.Status, apiMessage(data))
		case resp.StatusCode == http.StatusAccepted:
			return false, status, 0, nil // not done yet: the caller polls
		}
		if raw, ok := out.(*[]byte); ok {
			*raw = data
			return false, status, 0, nil
		}
		if out != nil {
			return false, status, 0, json.Unmarshal(data, out)
		}
		return false, status, 0, nil
	}
	if last == nil {
		return false, 0, 0, errors.New("coord: no coordinator URL")
	}
	return true, 0, after, last
}

// apiFailure rebuilds the typed failure a coordinator answered with, so
// that errors.Is(err, failure.InvalidShardSpec) holds on the client and
// tmmu -o json prints the code; nil when the answer carries none.
func apiFailure(data []byte) *failure.Error {
	var e APIError
	if json.Unmarshal(data, &e) != nil || e.FailureCode == "" {
		return nil
	}
	msg := e.Message
	if msg == "" { // a coordinator from before the fields
		msg = e.Error
	}
	return &failure.Error{Code: e.FailureCode, Operator: e.Operator, Message: msg, Diagnostics: e.Diagnostics}
}

func apiMessage(data []byte) string {
	var e APIError
	if json.Unmarshal(data, &e) == nil && e.Error != "" {
		return e.Error
	}
	return string(bytes.TrimSpace(data))
}

// Submit submits a job (idempotent: the same submission again returns the
// job unchanged). A submission the leader is still planning (202) is
// followed at /v1/submissions/{name} until it is answered, and submitted
// again if a new leader does not know it.
func (c *Client) Submit(ctx context.Context, req *SubmitRequest) (*Job, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	var j Job
	status, err := c.doStatus(ctx, http.MethodPost, "/v1/jobs", body, &j)
	for err == nil && status == http.StatusAccepted {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(c.backoff().Poll):
		}
		status, err = c.doStatus(ctx, http.MethodGet, "/v1/submissions/"+url.PathEscape(req.Name), nil, &j)
		if errors.Is(err, ErrNotFound) {
			status, err = c.doStatus(ctx, http.MethodPost, "/v1/jobs", body, &j)
		}
	}
	return &j, err
}

// Job returns a job.
func (c *Client) Job(ctx context.Context, name string) (*Job, error) {
	var j Job
	return &j, c.do(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(name), nil, &j)
}

// RecentJob returns a job with the expected plan hashes of its last two
// epochs only and its checkpoints without their shards (what a worker
// needs between restores; smaller for long histories and large worlds).
func (c *Client) RecentJob(ctx context.Context, name string) (*Job, error) {
	var j Job
	return &j, c.do(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(name)+"?expected=recent", nil, &j)
}

// IR returns a job's global IR under epoch e as canonical CBOR.
func (c *Client) IR(ctx context.Context, name string, e uint64) ([]byte, error) {
	var b []byte
	return b, c.do(ctx, http.MethodGet, fmt.Sprintf("/v1/jobs/%s/ir?epoch=%d", url.PathEscape(name), e), nil, &b)
}

// Jobs lists the jobs.
func (c *Client) Jobs(ctx context.Context) ([]JobSummary, error) {
	var out []JobSummary
	return out, c.do(ctx, http.MethodGet, "/v1/jobs", nil, &out)
}

// Status returns the status of the first node that answers, with the jobs
// as the leader holds them when that node is a follower and the leader
// answers too.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	var s Status
	if err := c.do(ctx, http.MethodGet, "/v1/status", nil, &s); err != nil {
		return nil, err
	}
	if s.Leader != "" && s.Leader != s.ID && s.LeaderHTTP != "" {
		var ls Status
		lc := &Client{URLs: []string{c.scheme() + s.LeaderHTTP}, HTTP: c.HTTP, Token: c.Token}
		if _, _, _, err := lc.once(ctx, http.MethodGet, "/v1/status", nil, &ls); err == nil && ls.ID == s.Leader {
			s.Jobs, s.JobsFrom = ls.Jobs, ls.JobsFrom
		}
	}
	return &s, nil
}

// scheme is the scheme of the client's URLs ("https://" or "http://").
func (c *Client) scheme() string {
	if len(c.URLs) > 0 && strings.HasPrefix(c.URLs[0], "https://") {
		return "https://"
	}
	return "http://"
}

// AddVoter adds a voter to the cluster.
func (c *Client) AddVoter(ctx context.Context, p Peer) (*Status, error) {
	body, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	var s Status
	return &s, c.do(ctx, http.MethodPost, "/v1/voters", body, &s)
}

// RemoveVoter removes a voter from the cluster.
func (c *Client) RemoveVoter(ctx context.Context, id string) (*Status, error) {
	var s Status
	return &s, c.do(ctx, http.MethodDelete, "/v1/voters/"+url.PathEscape(id), nil, &s)
}

// RankPlan returns a rank's plan of a job.
func (c *Client) RankPlan(ctx context.Context, job string, rank uint64) (*shard.RankPlan, error) {
	var rp shard.RankPlan
	return &rp, c.do(ctx, http.MethodGet, fmt.Sprintf("/v1/jobs/%s/ranks/%d/plan", url.PathEscape(job), rank), nil, &rp)
}

// Cancel cancels a job: its workers stop, its checkpoints stay.
func (c *Client) Cancel(ctx context.Context, job, reason string) (*Job, error) {
	body, err := json.Marshal(CancelRequest{Reason: reason})
	if err != nil {
		return nil, err
	}
	var j Job
	return &j, c.do(ctx, http.MethodPost, "/v1/jobs/"+url.PathEscape(job)+"/cancel", body, &j)
}

// Delete deletes a job: its workers stop, and its checkpoints and
// reports are removed.
func (c *Client) Delete(ctx context.Context, job string) error {
	return c.do(ctx, http.MethodDelete, "/v1/jobs/"+url.PathEscape(job), nil, nil)
}

// ReleaseRank removes identity's rank reservation in job (tmmu rank
// release): the operator's way to give a dead worker's rank to another
// identity, or to clear a malformed reservation.
func (c *Client) ReleaseRank(ctx context.Context, job, identity string) (*Release, error) {
	var r Release
	return &r, c.do(ctx, http.MethodDelete, "/v1/jobs/"+url.PathEscape(job)+"/ranks/"+url.PathEscape(identity), nil, &r)
}

// Replan sends an operator's replan request; token is the operator token
// ("" when the cluster needs none).
func (c *Client) Replan(ctx context.Context, job, token string, req *ReplanRequest) (*ReplanReply, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	var out ReplanReply
	cc := *c
	if token != "" {
		cc.Token = token
	}
	return &out, cc.do(ctx, http.MethodPost, "/v1/jobs/"+url.PathEscape(job)+"/replan", body, &out)
}

// PutFile streams a file to the data store (POST /v1/files) and returns
// how it is stored. r is read from its start again when a coordinator
// fails before answering; the upload is bounded by ctx, not by the
// client's request timeout.
func (c *Client) PutFile(ctx context.Context, name string, r io.ReadSeeker, size int64) (datastore.FileRef, error) {
	var ref datastore.FileRef
	hc := *c.HTTP
	hc.Timeout = 0
	var last error
	for _, base := range c.URLs {
		if _, err := r.Seek(0, io.SeekStart); err != nil {
			return ref, err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/files?name="+url.QueryEscape(name), io.NopCloser(r))
		if err != nil {
			return ref, err
		}
		req.ContentLength = size
		req.Header.Set("Content-Type", "application/octet-stream")
		if c.Token != "" {
			req.Header.Set("Authorization", "Bearer "+c.Token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return ref, ctx.Err()
			}
			last = err
			continue
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case err != nil:
			last = err
			continue
		case resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode >= 500 && resp.StatusCode != http.StatusInsufficientStorage:
			last = fmt.Errorf("coord: POST %s/v1/files: %s: %s", base, resp.Status, apiMessage(data))
			continue
		case resp.StatusCode >= 400:
			if fe := apiFailure(data); fe != nil {
				return ref, fe
			}
			return ref, fmt.Errorf("coord: %s: %s", resp.Status, apiMessage(data))
		}
		return ref, json.Unmarshal(data, &ref)
	}
	if last == nil {
		last = errors.New("coord: no coordinator URL")
	}
	return ref, last
}

// CommitDataset names a dataset (or weights file) made of stored files.
func (c *Client) CommitDataset(ctx context.Context, name string, req datastore.Request) (*datastore.Entry, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	var e datastore.Entry
	return &e, c.do(ctx, http.MethodPut, "/v1/datasets/"+url.PathEscape(name), body, &e)
}

// Datasets lists the named datasets.
func (c *Client) Datasets(ctx context.Context) ([]datastore.Entry, error) {
	var out []datastore.Entry
	return out, c.do(ctx, http.MethodGet, "/v1/datasets", nil, &out)
}

// Dataset returns a named dataset's manifest.
func (c *Client) Dataset(ctx context.Context, name string) (*datastore.Entry, error) {
	var e datastore.Entry
	return &e, c.do(ctx, http.MethodGet, "/v1/datasets/"+url.PathEscape(name), nil, &e)
}

// RemoveDataset removes a name and collects what nothing holds any more
// (force: even while running jobs pinned it).
func (c *Client) RemoveDataset(ctx context.Context, name string, force bool) (*DataRemoved, error) {
	q := ""
	if force {
		q = "?force=1"
	}
	var out DataRemoved
	return &out, c.do(ctx, http.MethodDelete, "/v1/datasets/"+url.PathEscape(name)+q, nil, &out)
}

// CheckpointShard returns one rank's object of a job's committed
// checkpoint (checkpoint.Encode's bytes).
func (c *Client) CheckpointShard(ctx context.Context, job string, step, rank uint64) ([]byte, error) {
	var b []byte
	return b, c.do(ctx, http.MethodGet, fmt.Sprintf("/v1/jobs/%s/checkpoints/%d/shards/%d", url.PathEscape(job), step, rank), nil, &b)
}

// Manifest returns the stored manifest of digest, checked against it.
func (c *Client) Manifest(ctx context.Context, digest ir.Hash) (*datastore.Manifest, error) {
	var b []byte
	if err := c.do(ctx, http.MethodGet, "/v1/manifests/"+digest.String(), nil, &b); err != nil {
		return nil, err
	}
	return datastore.DecodeManifest(b, digest)
}

// ReadFile returns bytes [off, off+n) of file i of the manifest of
// digest (its files, then its label files), fewer at the file's end; n
// at most datastore.MaxRead.
func (c *Client) ReadFile(ctx context.Context, digest ir.Hash, i int, off, n uint64) ([]byte, error) {
	var b []byte
	return b, c.do(ctx, http.MethodGet, fmt.Sprintf("/v1/manifests/%s/files/%d?off=%d&len=%d", digest, i, off, n), nil, &b)
}
