// Package dsa reads offline dynamic storage allocation instances: CSV files
// with the header id,lower,upper,size, one buffer a row, live over the
// half-open interval [lower, upper) and size bytes tall (the format of
// google/minimalloc and cappadokes/idealloc benchmarks). Two buffers may
// share bytes only when their intervals do not intersect.
//
// An instance becomes a pack.Problem (Problem) or a UML_Model_IR graph
// (Model) whose plan, under alignment 1, places exactly these buffers, so
// the planner's strategies and its independent verifier run on it
// unchanged.
package dsa

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/tmmu/tmmu/planner/pack"
)

// Buffer is one row of an instance.
type Buffer struct {
	ID           string
	Lower, Upper int64 // live over [Lower, Upper)
	Size         uint64
}

// Instance is a parsed CSV file.
type Instance struct {
	Name    string
	Buffers []Buffer
}

// ErrFormat reports a malformed instance file.
var ErrFormat = errors.New("dsa: malformed instance")

// Parse reads an instance. Rows must have four fields; ids must be unique
// and non-empty; lower < upper; size > 0. Errors name the line.
func Parse(name string, r io.Reader) (*Instance, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = 4
	cr.ReuseRecord = true
	head, err := cr.Read()
	if err == io.EOF {
		return nil, fmt.Errorf("%w: %s is empty, want the header id,lower,upper,size and a row per buffer", ErrFormat, name)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: header: %v", ErrFormat, name, fieldCount(err))
	}
	want := []string{"id", "lower", "upper", "size"}
	for i := range head {
		if strings.TrimSpace(strings.ToLower(head[i])) != want[i] {
			return nil, fmt.Errorf("%w: %s: header is %q, want id,lower,upper,size", ErrFormat, name, strings.Join(head, ","))
		}
	}
	in := &Instance{Name: name}
	seen := map[string]int{}
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil { // a *csv.ParseError names the line
			return nil, fmt.Errorf("%w: %s: %v", ErrFormat, name, fieldCount(err))
		}
		line, _ := cr.FieldPos(0)
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%w: %s line %d: %s", ErrFormat, name, line, fmt.Sprintf(format, args...))
		}
		b := Buffer{ID: strings.TrimSpace(rec[0])}
		if b.ID == "" {
			return nil, bad("empty id")
		}
		if prev, dup := seen[b.ID]; dup {
			return nil, bad("id %q repeats line %d", b.ID, prev)
		}
		seen[b.ID] = line
		if b.Lower, err = strconv.ParseInt(strings.TrimSpace(rec[1]), 10, 64); err != nil {
			return nil, bad("lower %q is not an integer", rec[1])
		}
		if b.Upper, err = strconv.ParseInt(strings.TrimSpace(rec[2]), 10, 64); err != nil {
			return nil, bad("upper %q is not an integer", rec[2])
		}
		if b.Size, err = strconv.ParseUint(strings.TrimSpace(rec[3]), 10, 64); err != nil {
			return nil, bad("size %q is not a non-negative integer", rec[3])
		}
		if b.Upper <= b.Lower {
			return nil, bad("buffer %q lives over [%d,%d), which is empty", b.ID, b.Lower, b.Upper)
		}
		if b.Size == 0 {
			return nil, bad("buffer %q has size 0", b.ID)
		}
		in.Buffers = append(in.Buffers, b)
	}
	if len(in.Buffers) == 0 {
		return nil, fmt.Errorf("%w: %s has no buffers", ErrFormat, name)
	}
	return in, nil
}

// fieldCount says how many fields a row must have when err is a row
// with another count.
func fieldCount(err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) && errors.Is(pe.Err, csv.ErrFieldCount) {
		return fmt.Errorf("line %d: %w, want 4 (id,lower,upper,size)", pe.Line, pe.Err)
	}
	return err
}

// ParseBytes is Parse over a byte slice.
func ParseBytes(name string, data []byte) (*Instance, error) {
	return Parse(name, bytes.NewReader(data))
}

// Write saves the instance as a CSV file Parse reads back: the header
// id,lower,upper,size, then the buffers in order.
func (in *Instance) Write(w io.Writer) error { return in.WritePlaced(w, nil) }

// WritePlaced is Write with an offset column after size when offsets is
// not nil: offsets[i] is buffer i's (tmmu plan -o csv).
func (in *Instance) WritePlaced(w io.Writer, offsets []uint64) error {
	cw := csv.NewWriter(w)
	head := []string{"id", "lower", "upper", "size"}
	if offsets != nil {
		head = append(head, "offset")
	}
	if err := cw.Write(head); err != nil {
		return err
	}
	for i, b := range in.Buffers {
		rec := []string{b.ID, strconv.FormatInt(b.Lower, 10), strconv.FormatInt(b.Upper, 10), strconv.FormatUint(b.Size, 10)}
		if offsets != nil {
			rec = append(rec, strconv.FormatUint(offsets[i], 10))
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// Problem returns the instance as a packing problem with alignment 1,
// buffers in file order.
func (in *Instance) Problem() *pack.Problem {
	p := &pack.Problem{Buffers: make([]pack.Buffer, len(in.Buffers))}
	for i, b := range in.Buffers {
		p.Buffers[i] = pack.Buffer{Start: b.Lower, End: b.Upper, Size: b.Size, Align: 1}
	}
	return p
}
