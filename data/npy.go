package data

import (
	"encoding/binary"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// npyHeader is what a .npy file's header says.
type npyHeader struct {
	descr   string   // "<u2", "|u1", "<f4", ...
	shape   []uint64 // () is a scalar
	dataOff int64    // where the array's bytes start
}

// maxNPYHeader bounds the header dictionary (NumPy writes well under
// 1 KiB; version 2 allows 4 GiB).
const maxNPYHeader = 1 << 20

// readNPYHeader parses the header of a .npy file (format versions 1, 2
// and 3): the magic, the version, the header length and the dictionary
// {'descr': ..., 'fortran_order': ..., 'shape': (...)}.
func readNPYHeader(r io.ReaderAt, size int64) (npyHeader, error) {
	var pre [12]byte
	if size < 10 {
		return npyHeader{}, fmt.Errorf("%d bytes, shorter than a .npy header", size)
	}
	n, _ := r.ReadAt(pre[:], 0)
	if n < 10 {
		return npyHeader{}, fmt.Errorf("cannot read the .npy magic")
	}
	if string(pre[:6]) != "\x93NUMPY" {
		return npyHeader{}, fmt.Errorf("no .npy magic (\\x93NUMPY) at offset 0")
	}
	var hlen, start int64
	switch pre[6] {
	case 1:
		hlen, start = int64(binary.LittleEndian.Uint16(pre[8:10])), 10
	case 2, 3:
		if n < 12 {
			return npyHeader{}, fmt.Errorf("cannot read the .npy header length")
		}
		hlen, start = int64(binary.LittleEndian.Uint32(pre[8:12])), 12
	default:
		return npyHeader{}, fmt.Errorf(".npy format version %d.%d is not 1, 2 or 3", pre[6], pre[7])
	}
	if hlen > maxNPYHeader || start+hlen > size {
		return npyHeader{}, fmt.Errorf(".npy header of %d bytes does not fit the %d-byte file", hlen, size)
	}
	hb := make([]byte, hlen)
	if _, err := r.ReadAt(hb, start); err != nil {
		return npyHeader{}, fmt.Errorf("reading the .npy header: %v", err)
	}
	h, err := parseNPYDict(string(hb))
	if err != nil {
		return npyHeader{}, err
	}
	h.dataOff = start + hlen
	return h, nil
}

// parseNPYDict reads the header's Python dict literal. Only what NumPy
// writes is accepted: string keys, a string descr, True/False and a
// tuple of non-negative integers.
func parseNPYDict(s string) (npyHeader, error) {
	p := &pyLit{s: strings.TrimRight(s, " \n\x00")}
	var h npyHeader
	seen := map[string]bool{}
	if !p.eat('{') {
		return h, fmt.Errorf(".npy header is not a dict: %.40q", s)
	}
	for !p.eat('}') {
		key, err := p.str()
		if err != nil {
			return h, err
		}
		if !p.eat(':') {
			return h, fmt.Errorf(".npy header: no ':' after %q", key)
		}
		seen[key] = true
		switch key {
		case "descr":
			if h.descr, err = p.str(); err != nil {
				return h, err
			}
		case "fortran_order":
			switch {
			case p.word("False"):
			case p.word("True"):
				return h, fmt.Errorf(".npy array in Fortran order: write it C-contiguous (np.ascontiguousarray)")
			default:
				return h, fmt.Errorf(".npy header: fortran_order is not True or False")
			}
		case "shape":
			if h.shape, err = p.tuple(); err != nil {
				return h, err
			}
		default:
			return h, fmt.Errorf(".npy header: unknown key %q", key)
		}
		if !p.eat(',') {
			if !p.eat('}') {
				return h, fmt.Errorf(".npy header: expected ',' or '}' at %d", p.i)
			}
			break
		}
	}
	for _, k := range []string{"descr", "fortran_order", "shape"} {
		if !seen[k] {
			return h, fmt.Errorf(".npy header has no %q", k)
		}
	}
	return h, nil
}

type pyLit struct {
	s string
	i int
}

func (p *pyLit) space() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\n') {
		p.i++
	}
}

func (p *pyLit) eat(c byte) bool {
	p.space()
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *pyLit) word(w string) bool {
	p.space()
	if strings.HasPrefix(p.s[p.i:], w) {
		p.i += len(w)
		return true
	}
	return false
}

func (p *pyLit) str() (string, error) {
	p.space()
	if p.i >= len(p.s) || (p.s[p.i] != '\'' && p.s[p.i] != '"') {
		return "", fmt.Errorf(".npy header: expected a string at %d", p.i)
	}
	q := p.s[p.i]
	end := strings.IndexByte(p.s[p.i+1:], q)
	if end < 0 {
		return "", fmt.Errorf(".npy header: unterminated string")
	}
	v := p.s[p.i+1 : p.i+1+end]
	p.i += end + 2
	return v, nil
}

func (p *pyLit) tuple() ([]uint64, error) {
	if !p.eat('(') {
		return nil, fmt.Errorf(".npy header: shape is not a tuple")
	}
	shape := []uint64{}
	for !p.eat(')') {
		p.space()
		j := p.i
		for j < len(p.s) && p.s[j] >= '0' && p.s[j] <= '9' {
			j++
		}
		if j == p.i {
			return nil, fmt.Errorf(".npy header: shape holds a non-integer at %d", p.i)
		}
		// NumPy writes Python ints; "L" suffixes come from Python 2.
		d, err := strconv.ParseUint(p.s[p.i:j], 10, 63)
		if err != nil {
			return nil, fmt.Errorf(".npy header: shape dimension %s: %v", p.s[p.i:j], err)
		}
		p.i = j
		p.eat('L')
		shape = append(shape, d)
		if !p.eat(',') {
			if !p.eat(')') {
				return nil, fmt.Errorf(".npy header: shape tuple not closed")
			}
			break
		}
	}
	return shape, nil
}

// elemType is a little-endian numeric element type.
type elemType struct {
	kind byte // 'u', 'i' or 'f'
	size int
}

func (t elemType) String() string {
	switch t.kind {
	case 'u':
		return fmt.Sprintf("uint%d", 8*t.size)
	case 'i':
		return fmt.Sprintf("int%d", 8*t.size)
	}
	return fmt.Sprintf("float%d", 8*t.size)
}

// parseDescr reads a NumPy descr: '<' or '|' byte order (big-endian is
// refused), then u, i or f and the size.
func parseDescr(d string) (elemType, error) {
	if len(d) < 3 {
		return elemType{}, fmt.Errorf("dtype %q is not a numeric type", d)
	}
	switch d[0] {
	case '<', '|', '=':
	case '>':
		return elemType{}, fmt.Errorf("dtype %q is big-endian: write it little-endian (.astype('<%s'))", d, d[1:])
	default:
		return elemType{}, fmt.Errorf("dtype %q is not a numeric type", d)
	}
	size, err := strconv.Atoi(d[2:])
	if err != nil {
		return elemType{}, fmt.Errorf("dtype %q is not a numeric type", d)
	}
	t := elemType{kind: d[1], size: size}
	switch {
	case (t.kind == 'u' || t.kind == 'i') && (size == 1 || size == 2 || size == 4 || size == 8):
	case t.kind == 'f' && size == 4:
	default:
		return elemType{}, fmt.Errorf("dtype %q is not one tmmu reads (integers of 1 to 8 bytes, float32)", d)
	}
	return t, nil
}
