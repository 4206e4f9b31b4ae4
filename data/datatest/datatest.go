// Package datatest writes the files package data reads, for tests.
package datatest

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// NPY returns a version-1 .npy file as NumPy writes it: dtype descr
// (such as "<f4" or "<u2"), C order, shape, then body.
func NPY(descr string, shape []uint64, body []byte) []byte {
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = fmt.Sprint(d)
	}
	tuple := strings.Join(dims, ", ")
	if len(shape) == 1 {
		tuple += ","
	}
	h := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, tuple)
	for (10+len(h)+1)%64 != 0 {
		h += " "
	}
	h += "\n"
	out := []byte("\x93NUMPY\x01\x00")
	out = binary.LittleEndian.AppendUint16(out, uint16(len(h)))
	out = append(out, h...)
	return append(out, body...)
}
