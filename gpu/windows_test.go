//go:build cgo

package gpu

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
)

// windowedWGSL declares every window of slot 0 and reads and writes a
// word by its index in the whole buffer.
func windowedWGSL(ws Windows) string {
	var b strings.Builder
	for w := range ws.Count {
		fmt.Fprintf(&b, "@group(0) @binding(%d) var<storage, read_write> w%d: array<u32>;\n", ws.Binding(0, w), w)
	}
	b.WriteString("@group(0) @binding(6) var<storage, read> params: array<u32>;\n")
	shift := 0
	for uint64(4)<<shift < ws.Bytes {
		shift++
	}
	fmt.Fprintf(&b, "const SHIFT = %du;\nconst MASK = %du;\n", shift, (ws.Bytes/4)-1)
	b.WriteString("fn rd(i: u32) -> u32 {\n  switch i >> SHIFT {\n")
	for w := range ws.Count {
		fmt.Fprintf(&b, "    case %du: { return w%d[i & MASK]; }\n", w, w)
	}
	b.WriteString("    default: { return 0u; }\n  }\n}\nfn wr(i: u32, v: u32) {\n  switch i >> SHIFT {\n")
	for w := range ws.Count {
		fmt.Fprintf(&b, "    case %du: { w%d[i & MASK] = v; }\n", w, w)
	}
	b.WriteString(`    default: { }
  }
}
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
  let k = id.x;
  if (k >= params[0]) { return; }
  let p = params[1u + k];
  wr(p + 1u, rd(p) * 3u + 1u);
}
`)
	return b.String()
}

// TestBuffersLargerThanOneBinding binds a buffer of two and a half
// windows to one slot and reads and writes words on both sides of every
// window boundary.
func TestBuffersLargerThanOneBinding(t *testing.T) {
	d := open(t)
	ws := d.Windows()
	t.Logf("windows: %+v", ws)
	if ws.Count < 3 {
		t.Skipf("the device binds %d windows per slot", ws.Count)
	}
	size := 2*ws.Bytes + ws.Bytes/2
	big, err := d.NewBuffer(size, "big")
	if err != nil {
		t.Fatal(err)
	}
	defer big.Release()
	k, err := d.Compile("windowed", windowedWGSL(ws))
	if err != nil {
		t.Fatal(err)
	}
	W := uint32(ws.Bytes / 4)
	probes := []uint32{0, W - 2, W - 1, W + 7, 2*W - 1, 2*W + 3, uint32(size/4) - 2}
	for i, p := range probes {
		var v [4]byte
		binary.LittleEndian.PutUint32(v[:], uint32(1000+i))
		if err := d.Write(big, 4*uint64(p), v[:]); err != nil {
			t.Fatal(err)
		}
	}
	// One probe at a time: W−2 writes W−1, which the next probe reads.
	for i, p := range probes {
		if err := d.Dispatch(k, []*Buffer{big}, []uint32{1, p}, 1, 1, 1); err != nil {
			t.Fatalf("probe %d: %v", i, err)
		}
	}
	want := map[uint32]uint32{}
	for i, p := range probes {
		in := uint32(1000 + i)
		if prev, ok := want[p]; ok {
			in = prev
		}
		want[p+1] = in*3 + 1
	}
	for p, w := range want {
		raw, err := d.Read(big, 4*uint64(p), 4)
		if err != nil {
			t.Fatal(err)
		}
		if got := binary.LittleEndian.Uint32(raw); got != w {
			t.Errorf("word %d (window %d) = %d, want %d", p, p/W, got, w)
		}
	}
}

// TestBindingDispatchesRepeatedly: a Binding creates one bind group for
// any number of dispatches, and SetParams never changes what a dispatch
// recorded before it sees.
func TestBindingDispatchesRepeatedly(t *testing.T) {
	d := open(t)
	k, err := d.Compile("accumulate", bindings+`
@compute @workgroup_size(1)
fn main() { r0[0] = r0[0] * 2u + params[0]; }
`)
	if err != nil {
		t.Fatal(err)
	}
	buf, err := d.NewBuffer(16, "acc")
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.Bind(k, []*Buffer{buf}, []uint32{1})
	if err != nil {
		t.Fatal(err)
	}
	before := d.Stats()
	want := uint32(0)
	for i := range uint32(20) {
		if i%3 == 0 {
			if err := b.SetParams(0, []uint32{i}); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Dispatch(1, 1, 1); err != nil {
			t.Fatal(err)
		}
		want = want*2 + i - i%3 // the params set last
	}
	raw, err := d.Read(buf, 0, 4)
	if err != nil {
		t.Fatal(err)
	}
	if got := binary.LittleEndian.Uint32(raw); got != want {
		t.Errorf("after 20 dispatches: %d, want %d", got, want)
	}
	after := d.Stats()
	if n := after.BindGroups - before.BindGroups; n != 0 {
		t.Errorf("%d bind groups created by 20 dispatches of a Binding, want 0", n)
	}
	if n := after.Dispatches - before.Dispatches; n != 20 {
		t.Errorf("%d dispatches counted, want 20", n)
	}
	if err := b.SetParams(1, []uint32{5}); err == nil {
		t.Error("SetParams past the params accepted")
	}
	buf.Release()
	if err := b.Dispatch(1, 1, 1); err == nil || !strings.Contains(err.Error(), "after Release") {
		t.Errorf("dispatch with a released buffer: %v", err)
	}
	b.Release()
	b.Release()
	if err := b.Dispatch(1, 1, 1); err == nil {
		t.Error("dispatch of a released binding accepted")
	}
}

// TestBindRanges binds parts of one buffer (bindings lowered to 4 KiB,
// the buffer five of them): a range within one binding is the slot's
// whole array from the range's first word, a longer range is windows
// from its start, and the words outside a range are never touched.
// Ranges the device cannot bind are refused.
func TestBindRanges(t *testing.T) {
	d := openWith(t, Options{MaxBindingBytes: 4096})
	ws := d.Windows()
	if ws.Count < 4 || ws.Bytes != 4096 {
		t.Skipf("windows %+v", ws)
	}
	const words = 5 * 1024
	buf, err := d.NewBuffer(4*words, "ranged")
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Release()
	init := make([]byte, 4*words)
	for i := range words {
		binary.LittleEndian.PutUint32(init[4*i:], uint32(i))
	}
	if err := d.Write(buf, 0, init); err != nil {
		t.Fatal(err)
	}
	want := make([]uint32, words)
	for i := range want {
		want[i] = uint32(i)
	}
	// A range inside one binding, read and written as r0[i].
	flat, err := d.Compile("ranged-flat", bindings+`
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
  if (id.x < params[0]) { r0[id.x] = r0[id.x] * 3u + 1u; }
}
`)
	if err != nil {
		t.Fatal(err)
	}
	r := Range{Offset: 4096 + 256, Size: 2048}
	b, err := d.BindRanges(flat, []*Buffer{buf}, []Range{r}, []uint32{uint32(r.Size / 4)})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Dispatch(uint32(r.Size/4+63)/64, 1, 1); err != nil {
		t.Fatal(err)
	}
	b.Release()
	for i := r.Offset / 4; i < (r.Offset+r.Size)/4; i++ {
		want[i] = want[i]*3 + 1
	}
	// A range of three windows from byte 512: word p of the slot is word
	// 128+p of the buffer, across the windows' boundaries.
	win, err := d.Compile("ranged-windows", windowedWGSL(ws))
	if err != nil {
		t.Fatal(err)
	}
	r = Range{Offset: 512, Size: 3 * 4096}
	W := uint32(ws.Bytes / 4)
	for _, p := range []uint32{0, W - 1, W + 5, 2*W - 1, 3*W - 2} {
		b, err := d.BindRanges(win, []*Buffer{buf}, []Range{r}, []uint32{1, p})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Dispatch(1, 1, 1); err != nil {
			t.Fatal(err)
		}
		b.Release()
		at := uint32(r.Offset/4) + p
		want[at+1] = want[at]*3 + 1
	}
	raw, err := d.Read(buf, 0, 4*words)
	if err != nil {
		t.Fatal(err)
	}
	for i := range words {
		if got := binary.LittleEndian.Uint32(raw[4*i:]); got != want[i] {
			t.Fatalf("word %d = %d, want %d", i, got, want[i])
		}
	}
	for _, bad := range []Range{{Offset: 100, Size: 256}, {Offset: 4 * words, Size: 256}, {Offset: 0, Size: 4*words + 4}, {Offset: 256, Size: 6 * 4096}} {
		if _, err := d.BindRanges(flat, []*Buffer{buf}, []Range{bad}, []uint32{0}); err == nil {
			t.Errorf("range %+v of a %d-byte buffer accepted", bad, 4*words)
		}
	}
}
