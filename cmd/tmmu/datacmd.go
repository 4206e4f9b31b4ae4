package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/data"
	"github.com/tmmu/tmmu/datastore"
	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/planner"
	"github.com/tmmu/tmmu/safetensors"
	"github.com/tmmu/tmmu/weights"
)

var dataCmd = &command{
	name: "data",
	summary: "Store datasets and weights in a coordinator cluster for jobs to name: token files (flat uint16/uint32 .bin, 1-D integer .npy), " +
		"image sets (.npy samples with --labels) or a safetensors weights file, content-addressed in blocks, scanned once (digest, largest token id); list, inspect and remove them.",
	usage: "data put NAME FILE... [--labels FILE...] [--format uint16|uint32|npy|safetensors] [cluster flags] [-o text|json]\n" +
		"       tmmu data ls [cluster flags] [-o text|json]\n" +
		"       tmmu data inspect NAME [cluster flags] [-o text|json]\n" +
		"       tmmu data rm NAME [--force] [cluster flags] [-o text|json]",
	run: runData,
}

// putResult is what tmmu data put prints.
type putResult struct {
	datastore.Entry
	Seconds     float64 `json:"seconds"`
	BytesPerSec float64 `json:"bytes_per_second"`
}

func runData(c *command, e *env, args []string) error {
	sub, err := subcommand(c, e, args, "put", "ls", "inspect", "rm")
	if err != nil {
		return err
	}
	fs := newFlags(e, &command{name: "data " + sub, usage: c.usage, summary: c.summary})
	cf := addClusterFlags(fs)
	out := fs.String("o", "text", "output: text or json")
	var format, labels *string
	var force *bool
	switch sub {
	case "put":
		format = fs.String("format", "", "uint16, uint32, npy or safetensors (default: from the first file's extension: .npy npy, .safetensors safetensors, else uint16)")
		labels = fs.String("labels", "", "label files of an image set, comma-separated, one per sample file")
	case "rm":
		force = fs.Bool("force", false, "remove the name even while running jobs read the dataset (their pinned copy stays until they end)")
	}
	// The upload of a large file takes longer than a request.
	pos, cl, err := cf.parse(e, fs, out, args[1:])
	if err != nil {
		return err
	}
	timeout := *cf.timeout
	if sub == "put" && !flagSet(fs, "timeout") {
		timeout = 24 * time.Hour
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	switch sub {
	case "ls":
		if len(pos) != 0 {
			return usagef("data ls takes no arguments")
		}
		list, err := cl.Datasets(ctx)
		if err != nil {
			return err
		}
		return emit(e, *out, list, func(w io.Writer) {
			t := &table{align: "llllrrl"}
			t.add("NAME", "KIND", "FORMAT", "DIGEST", "LEN", "BYTES", "FILES")
			for _, x := range list {
				t.add(x.Name, x.M.Kind, x.M.Format, x.M.Digest.Short(), fmt.Sprint(x.M.Len), planner.FormatBytes(x.M.Bytes), fmt.Sprint(len(x.M.Files)+len(x.M.Labels)))
			}
			t.write(w)
		})
	case "inspect":
		if len(pos) != 1 {
			return usagef("data inspect takes one name")
		}
		x, err := cl.Dataset(ctx, pos[0])
		if err != nil {
			return err
		}
		return emit(e, *out, x, func(w io.Writer) { printDataset(w, x) })
	case "rm":
		if len(pos) != 1 {
			return usagef("data rm takes one name")
		}
		r, err := cl.RemoveDataset(ctx, pos[0], *force)
		if err != nil {
			return err
		}
		return emit(e, *out, r, func(w io.Writer) {
			fmt.Fprintf(w, "dataset %s removed: %d objects, %s collected", r.Name, r.Objects, planner.FormatBytes(r.Bytes))
			if len(r.PinnedBy) > 0 {
				fmt.Fprintf(w, "; jobs %s still read their pinned copy", strings.Join(r.PinnedBy, ", "))
			}
			fmt.Fprintln(w)
		})
	}
	if len(pos) < 2 {
		return usagef("data put takes a name and one or more files")
	}
	res, err := putDataset(ctx, cl, pos[0], pos[1:], splitList(*labels), *format)
	if err != nil {
		return err
	}
	return emit(e, *out, res, func(w io.Writer) {
		fmt.Fprintf(w, "stored %s: %s, %d files, %s in %s (%.1f MB/s)\n", res.Name, res.M.Kind, len(res.M.Files)+len(res.M.Labels),
			planner.FormatBytes(res.M.Bytes), time.Duration(res.Seconds*float64(time.Second)).Round(time.Millisecond), res.BytesPerSec/1e6)
		printDataset(w, &res.Entry)
	})
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// putDataset uploads files (and label files) and names them.
func putDataset(ctx context.Context, cl *api.Client, name string, files, labels []string, format string) (*putResult, error) {
	if err := datastore.CheckName(name); err != nil {
		return nil, err
	}
	if format == "" {
		switch strings.ToLower(filepath.Ext(files[0])) {
		case ".safetensors":
			format = "safetensors"
		default:
			format = string(data.GuessFormat(files[0]))
		}
	}
	start := time.Now()
	var total uint64
	up := func(paths []string) ([]datastore.FileRef, error) {
		var refs []datastore.FileRef
		for _, p := range paths {
			f, err := os.Open(p)
			if err != nil {
				return nil, ioError(err, p)
			}
			st, err := f.Stat()
			if err != nil {
				f.Close()
				return nil, ioError(err, p)
			}
			ref, err := cl.PutFile(ctx, filepath.Base(p), f, st.Size())
			f.Close()
			if err != nil {
				return nil, err
			}
			total += ref.Size
			refs = append(refs, ref)
		}
		return refs, nil
	}
	fr, err := up(files)
	if err != nil {
		return nil, err
	}
	lr, err := up(labels)
	if err != nil {
		return nil, err
	}
	x, err := cl.CommitDataset(ctx, name, datastore.Request{Format: format, Files: fr, Labels: lr})
	if err != nil {
		return nil, err
	}
	secs := time.Since(start).Seconds()
	return &putResult{Entry: *x, Seconds: secs, BytesPerSec: float64(total) / secs}, nil
}

func printDataset(w io.Writer, x *datastore.Entry) {
	m := x.M
	fmt.Fprintf(w, "name      %s\nkind      %s (%s)\ndigest    %s\nmanifest  %s\n", x.Name, m.Kind, m.Format, m.Digest, x.Manifest)
	switch m.Kind {
	case datastore.KindTokens:
		fmt.Fprintf(w, "tokens    %d (largest id %d)\n", m.Len, m.MaxToken)
	case datastore.KindImages:
		fmt.Fprintf(w, "samples   %d of %v %s (largest label %d)\n", m.Len, m.SampleShape, m.SampleType, m.MaxToken)
	}
	fmt.Fprintf(w, "stored    %s, %s\n", planner.FormatBytes(m.Bytes), time.Unix(m.Created, 0).UTC().Format(time.RFC3339))
	for _, f := range m.Files {
		fmt.Fprintf(w, "  %s  %s  %d blocks  sha256 %s\n", f.Name, planner.FormatBytes(f.Size), len(f.Blocks), f.SHA256.Short())
	}
	for _, f := range m.Labels {
		fmt.Fprintf(w, "  %s (labels)  %s  %d blocks  sha256 %s\n", f.Name, planner.FormatBytes(f.Size), len(f.Blocks), f.SHA256.Short())
	}
}

// dataRef turns a --data or --weights value into a job's reference: a
// stored dataset's name, or file:// URLs every worker mounts, which are
// scanned here (the submitting machine must see them too) so that the
// job pins their digest. vocab (0: unchecked) bounds the token ids.
func dataRef(value, format string, vocab uint64) (*api.DataRef, error) {
	if !strings.HasPrefix(value, "file://") {
		return &api.DataRef{Name: value}, nil
	}
	ref := &api.DataRef{URLs: strings.Split(value, ",")}
	paths, _, err := ref.Paths()
	if err != nil {
		return nil, err
	}
	if format == "" {
		format = string(data.GuessFormat(paths[0]))
		if strings.EqualFold(filepath.Ext(paths[0]), ".safetensors") {
			format = "safetensors"
		}
	}
	ref.Format = format
	if format == "safetensors" {
		if len(paths) != 1 {
			return nil, usagef("weights are one safetensors file")
		}
		b, err := os.ReadFile(paths[0])
		if err != nil {
			return nil, ioError(err, paths[0])
		}
		ref.Digest, ref.Kind = ir.Hash(sha256.Sum256(b)), datastore.KindWeights
		return ref, nil
	}
	d, sum, closeData, err := openTokens(strings.Join(paths, ","), format, vocab)
	if err != nil {
		return nil, err
	}
	closeData()
	ref.Digest, ref.Kind, ref.Len, ref.MaxToken, ref.Sample = ir.Hash(sum.Digest), string(d.Kind), d.Len, sum.MaxToken, d.SampleShape
	return ref, nil
}

// checkMountedWeights checks a mounted weights file against the graph
// here, as the coordinator checks stored ones.
func checkMountedWeights(ref *api.DataRef, g *ir.Graph) error {
	if ref == nil || ref.Stored() {
		return nil
	}
	paths, _, err := ref.Paths()
	if err != nil {
		return err
	}
	return checkWeightsFile(paths[0], g)
}

// checkWeightsFile checks a local safetensors file against g's
// parameters (weights.Check), naming the file in the error.
func checkWeightsFile(path string, g *ir.Graph) error {
	f, err := os.Open(path)
	if err != nil {
		return ioError(err, path)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ioError(err, path)
	}
	sf, err := safetensors.Open(f, st.Size())
	if err != nil {
		return err
	}
	if err := weights.Check(sf, g); err != nil {
		if fe, ok := err.(*failure.Error); ok {
			fe.With("file", path)
		}
		return err
	}
	return nil
}
