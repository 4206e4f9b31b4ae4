package engine

import (
	"fmt"
	"math/bits"
	"strings"

	"github.com/tmmu/tmmu/gpu"
)

// WGSL twins of the reference kernels (kernels.go): the same params
// words, the same loops and the same float32 operations in the same
// order. Memory is up to gpu.NumSlots (6) read_write storage slots of
// u32 words, bindings 0 to 5 (a windowed slot's further windows at the
// bindings after the params, see gpu.Windows.Binding), and the params
// words at binding gpu.ParamsBinding (6). Each kernel body runs with t, the
// invocation id (or g and l, the workgroup and lane), and checks its own
// bounds.
//
// A kernel reaches operand o (params words o, o+1: its slot and word
// offset) through ld, ldi and st. The module is compiled for one binding
// shape (see bindShape): which slot holds each operand, and which slots
// are bound as windows. The slot of an operand is a constant of the
// module (sl), so once the compiler inlines ld into a kernel it indexes
// that slot's array directly, with no run-time choice between slots.

// wgslWorkgroup is the workgroup size of every kernel.
const wgslWorkgroup = wgLanes

// bindShape is how one launch binds its operands on a device: operand k
// lives in slot slot[k]; slot s is one binding (bytes [0, 4·len) of its
// array are the operand words), or, where windowed[s], ws.Count windows
// of ws.Bytes (word i lives in window i >> log2(ws.Bytes/4)), for an
// operand larger than one binding (package gpu, "Buffers larger than one
// binding").
type bindShape struct {
	slot     []int
	windowed []bool
}

// key names the module of kernel for this shape, e.g. "matmul/0.1.0/-w".
func (b bindShape) key(kernel string) string {
	var k strings.Builder
	k.WriteString(kernel)
	for i, s := range b.slot {
		k.WriteByte("/."[min(i, 1)])
		fmt.Fprint(&k, s)
	}
	k.WriteByte('/')
	for _, w := range b.windowed {
		k.WriteByte("-w"[btoi(w)])
	}
	return k.String()
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// wgslPrelude declares the bindings of shape b and the functions that
// read and write a slot's word (rd, wr) and map an operand to its slot
// (sl).
func wgslPrelude(ws gpu.Windows, b bindShape) string {
	var w strings.Builder
	for s, win := range b.windowed {
		if !win {
			fmt.Fprintf(&w, "@group(0) @binding(%d) var<storage, read_write> r%d: array<u32>;\n", s, s)
			continue
		}
		for k := range ws.Count {
			fmt.Fprintf(&w, "@group(0) @binding(%d) var<storage, read_write> r%d_%d: array<u32>;\n", ws.Binding(s, k), s, k)
		}
	}
	fmt.Fprintf(&w, "@group(0) @binding(%d) var<storage, read> params: array<u32>;\n", gpu.ParamsBinding)
	fmt.Fprintf(&w, "const NW = %du;\nconst WSHIFT = %du;\nconst WMASK = %du;\n", ws.Count, bits.TrailingZeros64(max(ws.Bytes/4, 1)), max(ws.Bytes/4, 1)-1)
	for _, fn := range []struct{ sig, access, none string }{
		{"fn rd(s: u32, i: u32) -> u32", "return %s;", "return 0u;"},
		{"fn wr(s: u32, i: u32, v: u32)", "%s = v;", ""},
	} {
		w.WriteString(fn.sig + " {\n  switch s {\n")
		for s, win := range b.windowed {
			fmt.Fprintf(&w, "    case %du: {", s)
			if !win {
				fmt.Fprintf(&w, " "+fn.access+" }\n", fmt.Sprintf("r%d[i]", s))
				continue
			}
			w.WriteString("\n      switch min(i >> WSHIFT, NW - 1u) {\n")
			for k := range ws.Count {
				label := fmt.Sprintf("case %du:", k)
				if k == ws.Count-1 {
					label = "default:"
				}
				fmt.Fprintf(&w, "        %s { "+fn.access+" }\n", label, fmt.Sprintf("r%d_%d[i & WMASK]", s, k))
			}
			w.WriteString("      }\n    }\n")
		}
		fmt.Fprintf(&w, "    default: { %s }\n  }\n}\n", fn.none)
	}
	w.WriteString("fn sl(o: u32) -> u32 {\n  switch o {\n")
	for k, s := range b.slot {
		fmt.Fprintf(&w, "    case %du: { return %du; }\n", 2*k, s)
	}
	w.WriteString("    default: { return 0u; }\n  }\n}\n")
	return w.String() + wgslCommon
}

const wgslCommon = `
fn u(i: u32) -> u32 { return params[i]; }
fn f(i: u32) -> f32 { return bitcast<f32>(params[i]); }

fn ld(o: u32, i: u32) -> f32 { return bitcast<f32>(rd(sl(o), params[o + 1u] + i)); }
fn ldi(o: u32, i: u32) -> i32 { return bitcast<i32>(rd(sl(o), params[o + 1u] + i)); }
fn st(o: u32, i: u32, v: f32) { wr(sl(o), params[o + 1u] + i, bitcast<u32>(v)); }

const o0 = 0u; const o1 = 2u; const o2 = 4u; const o3 = 6u;
const o4 = 8u; const o5 = 10u; const o6 = 12u; const o7 = 14u;
const NEG = -3.4028234e38;
const GELU_C = 0.7978845608028654;
`

const wgslMain = `
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = gid.x + gid.y * nwg.x * 64u;
  body(t);
}
`

// wgslKernels holds each kernel's body: fn body(t: u32).
var wgslKernels = map[string]string{
	"fill": `fn body(t: u32) {
  if (t < u(2u)) { st(o0, t, f(3u)); }
}`,
	"embedding": `fn body(t: u32) {
  let rows = u(6u); let h = u(7u); let vocab = u(8u);
  if (t >= rows * h) { return; }
  let r = t / h; let j = t % h;
  let id = ldi(o1, r);
  var v = 0.0;
  if (id >= 0 && u32(id) < vocab) { v = ld(o0, u32(id) * h + j); }
  st(o2, t, v);
}`,
	"add": `fn body(t: u32) {
  if (t < u(6u)) { st(o2, t, ld(o0, t) + ld(o1, t % u(7u))); }
}`,
	"mul": `fn body(t: u32) {
  if (t < u(6u)) { st(o2, t, ld(o0, t) * ld(o1, t)); }
}`,
	"gelu": `fn body(t: u32) {
  if (t < u(4u)) {
    let x = ld(o0, t);
    st(o1, t, 0.5 * x * (1.0 + tanh(GELU_C * (x + 0.044715 * x * x * x))));
  }
}`,
	"gelu_bwd": `fn body(t: u32) {
  if (t < u(6u)) {
    let x = ld(o0, t);
    let th = tanh(GELU_C * (x + 0.044715 * x * x * x));
    let d = 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * GELU_C * (1.0 + 3.0 * 0.044715 * x * x);
    st(o2, t, ld(o1, t) * d);
  }
}`,
	"silu": `fn body(t: u32) {
  if (t < u(4u)) { let x = ld(o0, t); st(o1, t, x / (1.0 + exp(-x))); }
}`,
	"silu_bwd": `fn body(t: u32) {
  if (t < u(6u)) {
    let x = ld(o0, t);
    let s = 1.0 / (1.0 + exp(-x));
    st(o2, t, ld(o1, t) * (s * (1.0 + x * (1.0 - s))));
  }
}`,
	"ln_bwd_wb": `fn body(t: u32) {
  let h = u(13u); let hasb = u(14u); let r0 = u(15u); let r1 = u(16u);
  if (t >= h) { return; }
  var dw = 0.0; var db = 0.0;
  if (r0 > 0u) {
    dw = ld(o4, t);
    if (hasb != 0u) { db = ld(o5, t); }
  }
  for (var r = r0; r < r1; r++) {
    let xh = (ld(o0, r * h + t) - ld(o1, r)) * ld(o2, r);
    let dy = ld(o3, r * h + t);
    dw += dy * xh; db += dy;
  }
  st(o4, t, dw);
  if (hasb != 0u) { st(o5, t, db); }
}`,
	"rms_bwd_w": `fn body(t: u32) {
  let h = u(9u); let r0 = u(10u); let r1 = u(11u);
  if (t >= h) { return; }
  var dw = 0.0;
  if (r0 > 0u) { dw = ld(o3, t); }
  for (var r = r0; r < r1; r++) { dw += ld(o2, r * h + t) * ld(o0, r * h + t) * ld(o1, r); }
  st(o3, t, dw);
}`,
	"rope": `fn body(t: u32) {
  let rows = u(4u); let seq = u(5u); let width = u(6u); let hd = u(7u); let inv = u(8u);
  let pairs = width / 2u;
  if (t >= rows * pairs) { return; }
  let r = t / pairs; let p = t % pairs;
  let pos = f32(r % seq);
  let i = p % (hd / 2u);
  let theta = pos * pow(10000.0, -2.0 * f32(i) / f32(hd));
  let c = cos(theta);
  var s = sin(theta);
  if (inv != 0u) { s = -s; }
  let a = ld(o0, r * width + 2u * p); let b = ld(o0, r * width + 2u * p + 1u);
  st(o1, r * width + 2u * p, a * c - b * s);
  st(o1, r * width + 2u * p + 1u, a * s + b * c);
}`,
	"emb_bwd": `fn body(t: u32) {
  let h = u(7u); let vocab = u(8u); let r0 = u(9u); let r1 = u(10u);
  if (t >= h) { return; }
  for (var r = r0; r < r1; r++) {
    let id = ldi(o0, r);
    if (id >= 0 && u32(id) < vocab) {
      let at = u32(id) * h + t;
      st(o2, at, ld(o2, at) + ld(o1, r * h + t));
    }
  }
}`,
	"reduce_sum": `fn body(t: u32) {
  let n = u(5u); let r0 = u(6u); let r1 = u(7u);
  if (t >= n) { return; }
  var s = 0.0;
  if (r0 > 0u) { s = ld(o1, t); }
  for (var r = r0; r < r1; r++) { s += ld(o0, r * n + t); }
  st(o1, t, s);
}`,
	"adamw": `fn body(t: u32) {
  let n = u(8u); let poff = u(9u); let goff = u(10u);
  let lr = f(11u); let b1 = f(12u); let b2 = f(13u); let eps = f(14u); let wd = f(15u); let c1 = f(16u); let c2 = f(17u);
  if (t >= n) { return; }
  let g = ld(o1, goff + t);
  let m = b1 * ld(o2, t) + (1.0 - b1) * g;
  let v = b2 * ld(o3, t) + (1.0 - b2) * g * g;
  st(o2, t, m);
  st(o3, t, v);
  var p = ld(o0, poff + t);
  p -= lr * (m / c1 / (sqrt(v / c2) + eps) + wd * p);
  st(o0, poff + t, p);
}`,
}

// wgslGroupPrelude holds what workgroup kernels share: the lane
// reductions (the tree of laneSum and laneMax in groups.go) and the
// attention score.
const wgslGroupPrelude = `
var<workgroup> red: array<f32, 64>;

// max_sumexp is (m, Σ exp(x − m)) over row [base, base+n) of operand 0.
fn max_sumexp(base: u32, n: u32, l: u32) -> vec2<f32> {
  var a = NEG;
  for (var v = l; v < n; v += 64u) { a = max(a, ld(o0, base + v)); }
  let m = tree_max(l, a);
  var b = 0.0;
  for (var v = l; v < n; v += 64u) { b += exp(ld(o0, base + v) - m); }
  return vec2<f32>(m, tree_sum(l, b));
}

fn tree_sum(l: u32, v: f32) -> f32 {
  red[l] = v;
  workgroupBarrier();
  for (var s = 32u; s > 0u; s >>= 1u) {
    if (l < s) { red[l] = red[l] + red[l + s]; }
    workgroupBarrier();
  }
  let r = red[0];
  workgroupBarrier();
  return r;
}

fn tree_max(l: u32, v: f32) -> f32 {
  red[l] = v;
  workgroupBarrier();
  for (var s = 32u; s > 0u; s >>= 1u) {
    if (l < s) { red[l] = max(red[l], red[l + s]); }
    workgroupBarrier();
  }
  let r = red[0];
  workgroupBarrier();
  return r;
}

fn attn_score(q: u32, kk: u32, D: u32, scale: f32) -> f32 {
  var s = 0.0;
  for (var e = 0u; e < D; e++) { s += ld(o0, q + e) * ld(o1, kk + e); }
  return s * scale;
}
`

const wgslGroupMain = `
@compute @workgroup_size(64)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  body(wid.x + wid.y * nwg.x, lid.x);
}
`

// wgslGroupKernels holds each workgroup kernel's body: fn body(g: u32,
// l: u32), g the group (the row), l the lane. Every workgroupBarrier is
// in uniform control flow: the early return tests only g and params.
var wgslGroupKernels = map[string]string{
	// One workgroup per 32×32 tile of y; lane l computes the 4×4 block
	// at rows 4·(l/8), columns 4·(l%8) of it, each output summed in r
	// order from zero (the cpu's matmul4x4). Loads past the edge read
	// the last row or column and are not stored.
	"matmul": `fn body(g: u32, l: u32) {
  let M = u(6u); let N = u(7u);
  let as0 = u(9u); let as1 = u(10u); let bs0 = u(11u); let bs1 = u(12u); let r0 = u(13u); let r1 = u(14u);
  let tn = (N + 31u) / 32u;
  if (g >= ((M + 31u) / 32u) * tn) { return; }
  let i = (g / tn) * 32u + (l / 8u) * 4u; let j = (g % tn) * 32u + (l % 8u) * 4u;
  if (i >= M || j >= N) { return; }
  let a0 = i * as0; let a1 = min(i + 1u, M - 1u) * as0; let a2 = min(i + 2u, M - 1u) * as0; let a3 = min(i + 3u, M - 1u) * as0;
  let b0 = j * bs1; let b1 = min(j + 1u, N - 1u) * bs1; let b2 = min(j + 2u, N - 1u) * bs1; let b3 = min(j + 3u, N - 1u) * bs1;
  var s0 = vec4<f32>(0.0); var s1 = vec4<f32>(0.0); var s2 = vec4<f32>(0.0); var s3 = vec4<f32>(0.0);
  if (r0 > 0u) {
    let c0 = j; let c1 = min(j + 1u, N - 1u); let c2 = min(j + 2u, N - 1u); let c3 = min(j + 3u, N - 1u);
    let y0 = i * N; let y1 = min(i + 1u, M - 1u) * N; let y2 = min(i + 2u, M - 1u) * N; let y3 = min(i + 3u, M - 1u) * N;
    s0 = vec4<f32>(ld(o2, y0 + c0), ld(o2, y0 + c1), ld(o2, y0 + c2), ld(o2, y0 + c3));
    s1 = vec4<f32>(ld(o2, y1 + c0), ld(o2, y1 + c1), ld(o2, y1 + c2), ld(o2, y1 + c3));
    s2 = vec4<f32>(ld(o2, y2 + c0), ld(o2, y2 + c1), ld(o2, y2 + c2), ld(o2, y2 + c3));
    s3 = vec4<f32>(ld(o2, y3 + c0), ld(o2, y3 + c1), ld(o2, y3 + c2), ld(o2, y3 + c3));
  }
  for (var r = r0; r < r1; r++) {
    let ra = r * as1; let rb = r * bs0;
    let bv = vec4<f32>(ld(o1, rb + b0), ld(o1, rb + b1), ld(o1, rb + b2), ld(o1, rb + b3));
    s0 += ld(o0, a0 + ra) * bv;
    s1 += ld(o0, a1 + ra) * bv;
    s2 += ld(o0, a2 + ra) * bv;
    s3 += ld(o0, a3 + ra) * bv;
  }
  var rows = array<vec4<f32>, 4>(s0, s1, s2, s3);
  for (var ii = 0u; ii < 4u; ii++) {
    if (i + ii < M) {
      let v = rows[ii];
      for (var jj = 0u; jj < 4u; jj++) {
        if (j + jj < N) { st(o2, (i + ii) * N + j + jj, v[jj]); }
      }
    }
  }
}`,
	"layernorm": `fn body(g: u32, l: u32) {
  let rows = u(12u); let h = u(13u); let eps = f(14u);
  if (g >= rows) { return; }
  let base = g * h;
  var a = 0.0;
  for (var j = l; j < h; j += 64u) { a += ld(o0, base + j); }
  let mean = tree_sum(l, a) / f32(h);
  var b = 0.0;
  for (var j = l; j < h; j += 64u) { let d = ld(o0, base + j) - mean; b += d * d; }
  let rstd = 1.0 / sqrt(tree_sum(l, b) / f32(h) + eps);
  for (var j = l; j < h; j += 64u) { st(o3, base + j, (ld(o0, base + j) - mean) * rstd * ld(o1, j) + ld(o2, j)); }
  if (l == 0u) { st(o4, g, mean); st(o5, g, rstd); }
}`,
	"ln_bwd_x": `fn body(g: u32, l: u32) {
  let rows = u(12u); let h = u(13u);
  if (g >= rows) { return; }
  let base = g * h;
  let mean = ld(o2, g); let rstd = ld(o3, g);
  var a = 0.0;
  for (var j = l; j < h; j += 64u) { a += ld(o4, base + j) * ld(o1, j); }
  let s1 = tree_sum(l, a) / f32(h);
  var b = 0.0;
  for (var j = l; j < h; j += 64u) { b += ld(o4, base + j) * ld(o1, j) * ((ld(o0, base + j) - mean) * rstd); }
  let s2 = tree_sum(l, b) / f32(h);
  for (var j = l; j < h; j += 64u) {
    let xh = (ld(o0, base + j) - mean) * rstd;
    let gr = ld(o4, base + j) * ld(o1, j);
    st(o5, base + j, rstd * (gr - s1 - xh * s2));
  }
}`,
	"rmsnorm": `fn body(g: u32, l: u32) {
  let rows = u(8u); let h = u(9u); let eps = f(10u);
  if (g >= rows) { return; }
  let base = g * h;
  var a = 0.0;
  for (var j = l; j < h; j += 64u) { let x = ld(o0, base + j); a += x * x; }
  let rstd = 1.0 / sqrt(tree_sum(l, a) / f32(h) + eps);
  for (var j = l; j < h; j += 64u) { st(o2, base + j, ld(o0, base + j) * rstd * ld(o1, j)); }
  if (l == 0u) { st(o3, g, rstd); }
}`,
	"rms_bwd_x": `fn body(g: u32, l: u32) {
  let rows = u(10u); let h = u(11u);
  if (g >= rows) { return; }
  let base = g * h;
  let rstd = ld(o2, g);
  var a = 0.0;
  for (var j = l; j < h; j += 64u) { a += ld(o3, base + j) * ld(o1, j) * ld(o0, base + j) * rstd; }
  let s = tree_sum(l, a) / f32(h);
  for (var j = l; j < h; j += 64u) {
    let xh = ld(o0, base + j) * rstd;
    st(o4, base + j, rstd * (ld(o3, base + j) * ld(o1, j) - xh * s));
  }
}`,
	"xent_rows": `fn body(g: u32, l: u32) {
  let rows = u(6u); let vocab = u(7u);
  if (g >= rows) { return; }
  let base = g * vocab;
  let ms = max_sumexp(base, vocab, l);
  let m = ms.x; let s = ms.y;
  if (l == 0u) {
    let label = ldi(o1, g);
    var x = 0.0;
    if (label >= 0 && u32(label) < vocab) { x = ld(o0, base + u32(label)); }
    st(o2, g, m + log(s) - x);
  }
}`,
	"xent_mean": `fn body(g: u32, l: u32) {
  let rows = u(4u);
  if (g >= 1u) { return; }
  var a = 0.0;
  for (var r = l; r < rows; r += 64u) { a += ld(o0, r); }
  let total = tree_sum(l, a);
  if (l == 0u) { st(o1, 0u, total / f32(rows)); }
}`,
	"xent_bwd": `fn body(g: u32, l: u32) {
  let rows = u(8u); let vocab = u(9u);
  if (g >= rows) { return; }
  let base = g * vocab;
  let ms = max_sumexp(base, vocab, l);
  let m = ms.x; let s = ms.y;
  let label = ldi(o1, g);
  let scale = ld(o2, 0u) / f32(rows);
  for (var v = l; v < vocab; v += 64u) {
    var p = exp(ld(o0, base + v) - m) / s;
    if (i32(v) == label) { p -= 1.0; }
    st(o3, base + v, p * scale);
  }
}`,
	"attn": `
var<workgroup> sc: array<f32, 2048>;
fn body(g: u32, l: u32) {
  let B = u(10u); let S = u(11u); let H = u(12u); let KV = u(13u); let D = u(14u);
  let qs0 = u(15u); let qs1 = u(16u); let ks0 = u(17u); let ks1 = u(18u); let vs0 = u(19u); let vs1 = u(20u);
  let scale = f(21u);
  if (g >= B * H * S) { return; }
  let i = g % S; let h = (g / S) % H; let b = g / (S * H);
  let kh = h / (H / KV);
  let q = b * qs0 + i * qs1 + h * D;
  var a = NEG;
  for (var j = l; j <= i; j += 64u) {
    let s = attn_score(q, b * ks0 + j * ks1 + kh * D, D, scale);
    sc[j] = s;
    a = max(a, s);
  }
  let m = tree_max(l, a);
  var c = 0.0;
  for (var j = l; j <= i; j += 64u) { c += exp(sc[j] - m); }
  let lse = m + log(tree_sum(l, c));
  for (var j = l; j <= i; j += 64u) { sc[j] = exp(sc[j] - lse); }
  workgroupBarrier();
  for (var d = l; d < D; d += 64u) {
    var acc = 0.0;
    for (var j = 0u; j <= i; j++) { acc += sc[j] * ld(o2, b * vs0 + j * vs1 + kh * D + d); }
    st(o3, (b * S + i) * H * D + h * D + d, acc);
  }
  if (l == 0u) { st(o4, (b * H + h) * S + i, lse); }
}`,
	"attn_bwd_q": `
var<workgroup> sc: array<f32, 2048>;
fn body(g: u32, l: u32) {
  let B = u(14u); let S = u(15u); let H = u(16u); let KV = u(17u); let D = u(18u);
  let qs0 = u(19u); let qs1 = u(20u); let ks0 = u(21u); let ks1 = u(22u); let vs0 = u(23u); let vs1 = u(24u);
  let ds0 = u(25u); let ds1 = u(26u); let scale = f(27u);
  if (g >= B * H * S) { return; }
  let i = g % S; let h = (g / S) % H; let b = g / (S * H);
  let kh = h / (H / KV);
  let q = b * qs0 + i * qs1 + h * D;
  let row = (b * S + i) * H * D + h * D;
  let lse = ld(o4, (b * H + h) * S + i);
  var di = 0.0;
  for (var e = 0u; e < D; e++) { di += ld(o5, row + e) * ld(o3, row + e); }
  for (var j = l; j <= i; j += 64u) {
    let kj = b * ks0 + j * ks1 + kh * D; let vj = b * vs0 + j * vs1 + kh * D;
    let p = exp(attn_score(q, kj, D, scale) - lse);
    var dp = 0.0;
    for (var e = 0u; e < D; e++) { dp += ld(o5, row + e) * ld(o2, vj + e); }
    sc[j] = p * (dp - di);
  }
  workgroupBarrier();
  for (var d = l; d < D; d += 64u) {
    var acc = 0.0;
    for (var j = 0u; j <= i; j++) { acc += sc[j] * ld(o1, b * ks0 + j * ks1 + kh * D + d); }
    st(o6, b * ds0 + i * ds1 + h * D + d, acc * scale);
  }
}`,
	"attn_bwd_kv": `
var<workgroup> sc: array<f32, 2048>;
fn prob(q: u32, kj: u32, D: u32, scale: f32, lse: f32) -> f32 {
  return exp(attn_score(q, kj, D, scale) - lse);
}
fn body(g: u32, l: u32) {
  let B = u(16u); let S = u(17u); let H = u(18u); let KV = u(19u); let D = u(20u);
  let qs0 = u(21u); let qs1 = u(22u); let ks0 = u(23u); let ks1 = u(24u); let vs0 = u(25u); let vs1 = u(26u);
  let dks0 = u(27u); let dks1 = u(28u); let dvs0 = u(29u); let dvs1 = u(30u); let scale = f(31u);
  if (g >= B * KV * S) { return; }
  let j = g % S; let kh = (g / S) % KV; let b = g / (S * KV);
  let group = H / KV;
  let kj = b * ks0 + j * ks1 + kh * D; let vj = b * vs0 + j * vs1 + kh * D;
  var dk = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
  var dv = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
  for (var h = kh * group; h < (kh + 1u) * group; h++) {
    for (var i = j + l; i < S; i += 64u) {
      sc[i] = prob(b * qs0 + i * qs1 + h * D, kj, D, scale, ld(o4, (b * H + h) * S + i));
    }
    workgroupBarrier();
    for (var c = 0u; c * 64u + l < D; c++) {
      let d = c * 64u + l;
      var acc = dv[c];
      for (var i = j; i < S; i++) { acc += sc[i] * ld(o5, (b * S + i) * H * D + h * D + d); }
      dv[c] = acc;
    }
    workgroupBarrier();
    for (var i = j + l; i < S; i += 64u) {
      let row = (b * S + i) * H * D + h * D;
      var dp = 0.0; var di = 0.0;
      for (var e = 0u; e < D; e++) {
        dp += ld(o5, row + e) * ld(o2, vj + e);
        di += ld(o5, row + e) * ld(o3, row + e);
      }
      sc[i] = prob(b * qs0 + i * qs1 + h * D, kj, D, scale, ld(o4, (b * H + h) * S + i)) * (dp - di);
    }
    workgroupBarrier();
    for (var c = 0u; c * 64u + l < D; c++) {
      let d = c * 64u + l;
      var acc = dk[c];
      for (var i = j; i < S; i++) { acc += sc[i] * ld(o0, b * qs0 + i * qs1 + h * D + d); }
      dk[c] = acc;
    }
    workgroupBarrier();
  }
  for (var c = 0u; c * 64u + l < D; c++) {
    let d = c * 64u + l;
    st(o6, b * dks0 + j * dks1 + kh * D + d, dk[c] * scale);
    st(o7, b * dvs0 + j * dvs1 + kh * D + d, dv[c]);
  }
}`,
}

// wgslSource returns the whole WGSL module of kernel name after prelude
// (wgslPrelude) and whether the kernel exists.
func wgslSource(prelude, name string, group bool) (string, bool) {
	if group {
		body, ok := wgslGroupKernels[name]
		return prelude + wgslGroupPrelude + body + wgslGroupMain, ok
	}
	body, ok := wgslKernels[name]
	return prelude + body + wgslMain, ok
}
