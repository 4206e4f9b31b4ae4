package engine

// WGSL twins of the reference kernels (kernels.go): the same params
// words, the same loops and the same float32 operations in the same
// order. Memory is six read_write storage bindings of u32 words (the
// launch's regions, bound whole; unused ones get a dummy buffer) and the
// params words at binding 6. Each kernel body runs with t, the invocation
// id, and checks its own bounds.

// wgslWorkgroup is the workgroup size of every kernel.
const wgslWorkgroup = 64

const wgslPrelude = `
@group(0) @binding(0) var<storage, read_write> r0: array<u32>;
@group(0) @binding(1) var<storage, read_write> r1: array<u32>;
@group(0) @binding(2) var<storage, read_write> r2: array<u32>;
@group(0) @binding(3) var<storage, read_write> r3: array<u32>;
@group(0) @binding(4) var<storage, read_write> r4: array<u32>;
@group(0) @binding(5) var<storage, read_write> r5: array<u32>;
@group(0) @binding(6) var<storage, read> params: array<u32>;

fn u(i: u32) -> u32 { return params[i]; }
fn f(i: u32) -> f32 { return bitcast<f32>(params[i]); }

fn rd(s: u32, i: u32) -> u32 {
  switch s {
    case 0u: { return r0[i]; }
    case 1u: { return r1[i]; }
    case 2u: { return r2[i]; }
    case 3u: { return r3[i]; }
    case 4u: { return r4[i]; }
    default: { return r5[i]; }
  }
}

fn wr(s: u32, i: u32, v: u32) {
  switch s {
    case 0u: { r0[i] = v; }
    case 1u: { r1[i] = v; }
    case 2u: { r2[i] = v; }
    case 3u: { r3[i] = v; }
    case 4u: { r4[i] = v; }
    default: { r5[i] = v; }
  }
}

fn ld(o: u32, i: u32) -> f32 { return bitcast<f32>(rd(params[o], params[o + 1u] + i)); }
fn ldi(o: u32, i: u32) -> i32 { return bitcast<i32>(rd(params[o], params[o + 1u] + i)); }
fn st(o: u32, i: u32, v: f32) { wr(params[o], params[o + 1u] + i, bitcast<u32>(v)); }

const o0 = 0u; const o1 = 2u; const o2 = 4u; const o3 = 6u;
const o4 = 8u; const o5 = 10u; const o6 = 12u; const o7 = 14u;
const NEG = -3.4028234e38;
const GELU_C = 0.7978845608028654;

fn attn_score(q: u32, kk: u32, D: u32, scale: f32) -> f32 {
  var s = 0.0;
  for (var e = 0u; e < D; e++) { s += ld(o0, q + e) * ld(o1, kk + e); }
  return s * scale;
}
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
	"matmul": `fn body(t: u32) {
  let M = u(6u); let N = u(7u); let K = u(8u);
  let as0 = u(9u); let as1 = u(10u); let bs0 = u(11u); let bs1 = u(12u);
  if (t >= M * N) { return; }
  let i = t / N; let j = t % N;
  var s = 0.0;
  for (var r = 0u; r < K; r++) { s += ld(o0, i * as0 + r * as1) * ld(o1, r * bs0 + j * bs1); }
  st(o2, t, s);
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
	"layernorm": `fn body(t: u32) {
  let rows = u(12u); let h = u(13u); let eps = f(14u);
  if (t >= rows) { return; }
  let base = t * h;
  var mean = 0.0;
  for (var j = 0u; j < h; j++) { mean += ld(o0, base + j); }
  mean /= f32(h);
  var v = 0.0;
  for (var j = 0u; j < h; j++) { let d = ld(o0, base + j) - mean; v += d * d; }
  let rstd = 1.0 / sqrt(v / f32(h) + eps);
  for (var j = 0u; j < h; j++) { st(o3, base + j, (ld(o0, base + j) - mean) * rstd * ld(o1, j) + ld(o2, j)); }
  st(o4, t, mean);
  st(o5, t, rstd);
}`,
	"ln_bwd_x": `fn body(t: u32) {
  let rows = u(12u); let h = u(13u);
  if (t >= rows) { return; }
  let base = t * h;
  let mean = ld(o2, t); let rstd = ld(o3, t);
  var s1 = 0.0; var s2 = 0.0;
  for (var j = 0u; j < h; j++) {
    let xh = (ld(o0, base + j) - mean) * rstd;
    let g = ld(o4, base + j) * ld(o1, j);
    s1 += g; s2 += g * xh;
  }
  s1 /= f32(h); s2 /= f32(h);
  for (var j = 0u; j < h; j++) {
    let xh = (ld(o0, base + j) - mean) * rstd;
    let g = ld(o4, base + j) * ld(o1, j);
    st(o5, base + j, rstd * (g - s1 - xh * s2));
  }
}`,
	"ln_bwd_wb": `fn body(t: u32) {
  let rows = u(12u); let h = u(13u); let hasb = u(14u);
  if (t >= h) { return; }
  var dw = 0.0; var db = 0.0;
  for (var r = 0u; r < rows; r++) {
    let xh = (ld(o0, r * h + t) - ld(o1, r)) * ld(o2, r);
    let dy = ld(o3, r * h + t);
    dw += dy * xh; db += dy;
  }
  st(o4, t, dw);
  if (hasb != 0u) { st(o5, t, db); }
}`,
	"rmsnorm": `fn body(t: u32) {
  let rows = u(8u); let h = u(9u); let eps = f(10u);
  if (t >= rows) { return; }
  let base = t * h;
  var ss = 0.0;
  for (var j = 0u; j < h; j++) { let x = ld(o0, base + j); ss += x * x; }
  let rstd = 1.0 / sqrt(ss / f32(h) + eps);
  for (var j = 0u; j < h; j++) { st(o2, base + j, ld(o0, base + j) * rstd * ld(o1, j)); }
  st(o3, t, rstd);
}`,
	"rms_bwd_x": `fn body(t: u32) {
  let rows = u(10u); let h = u(11u);
  if (t >= rows) { return; }
  let base = t * h;
  let rstd = ld(o2, t);
  var s = 0.0;
  for (var j = 0u; j < h; j++) { s += ld(o3, base + j) * ld(o1, j) * ld(o0, base + j) * rstd; }
  s /= f32(h);
  for (var j = 0u; j < h; j++) {
    let xh = ld(o0, base + j) * rstd;
    st(o4, base + j, rstd * (ld(o3, base + j) * ld(o1, j) - xh * s));
  }
}`,
	"rms_bwd_w": `fn body(t: u32) {
  let rows = u(8u); let h = u(9u);
  if (t >= h) { return; }
  var dw = 0.0;
  for (var r = 0u; r < rows; r++) { dw += ld(o2, r * h + t) * ld(o0, r * h + t) * ld(o1, r); }
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
	"attn": `fn body(t: u32) {
  let B = u(10u); let S = u(11u); let H = u(12u); let KV = u(13u); let D = u(14u);
  let qs0 = u(15u); let qs1 = u(16u); let ks0 = u(17u); let ks1 = u(18u); let vs0 = u(19u); let vs1 = u(20u);
  let scale = f(21u);
  if (t >= B * H * S * D) { return; }
  let d = t % D; let i = (t / D) % S; let h = (t / (D * S)) % H; let b = t / (D * S * H);
  let kh = h / (H / KV);
  let q = b * qs0 + i * qs1 + h * D;
  var m = NEG;
  for (var j = 0u; j <= i; j++) { m = max(m, attn_score(q, b * ks0 + j * ks1 + kh * D, D, scale)); }
  var l = 0.0;
  for (var j = 0u; j <= i; j++) { l += exp(attn_score(q, b * ks0 + j * ks1 + kh * D, D, scale) - m); }
  let lse = m + log(l);
  var acc = 0.0;
  for (var j = 0u; j <= i; j++) {
    let p = exp(attn_score(q, b * ks0 + j * ks1 + kh * D, D, scale) - lse);
    acc += p * ld(o2, b * vs0 + j * vs1 + kh * D + d);
  }
  st(o3, (b * S + i) * H * D + h * D + d, acc);
  if (d == 0u) { st(o4, (b * H + h) * S + i, lse); }
}`,
	"attn_bwd_q": `fn body(t: u32) {
  let B = u(14u); let S = u(15u); let H = u(16u); let KV = u(17u); let D = u(18u);
  let qs0 = u(19u); let qs1 = u(20u); let ks0 = u(21u); let ks1 = u(22u); let vs0 = u(23u); let vs1 = u(24u);
  let ds0 = u(25u); let ds1 = u(26u); let scale = f(27u);
  if (t >= B * H * S * D) { return; }
  let d = t % D; let i = (t / D) % S; let h = (t / (D * S)) % H; let b = t / (D * S * H);
  let kh = h / (H / KV);
  let q = b * qs0 + i * qs1 + h * D;
  let row = (b * S + i) * H * D + h * D;
  let lse = ld(o4, (b * H + h) * S + i);
  var di = 0.0;
  for (var e = 0u; e < D; e++) { di += ld(o5, row + e) * ld(o3, row + e); }
  var acc = 0.0;
  for (var j = 0u; j <= i; j++) {
    let kj = b * ks0 + j * ks1 + kh * D; let vj = b * vs0 + j * vs1 + kh * D;
    let p = exp(attn_score(q, kj, D, scale) - lse);
    var dp = 0.0;
    for (var e = 0u; e < D; e++) { dp += ld(o5, row + e) * ld(o2, vj + e); }
    acc += p * (dp - di) * ld(o1, kj + d);
  }
  st(o6, b * ds0 + i * ds1 + h * D + d, acc * scale);
}`,
	"attn_bwd_kv": `fn body(t: u32) {
  let B = u(16u); let S = u(17u); let H = u(18u); let KV = u(19u); let D = u(20u);
  let qs0 = u(21u); let qs1 = u(22u); let ks0 = u(23u); let ks1 = u(24u); let vs0 = u(25u); let vs1 = u(26u);
  let dks0 = u(27u); let dks1 = u(28u); let dvs0 = u(29u); let dvs1 = u(30u); let scale = f(31u);
  if (t >= B * KV * S * D) { return; }
  let d = t % D; let j = (t / D) % S; let kh = (t / (D * S)) % KV; let b = t / (D * S * KV);
  let group = H / KV;
  let kj = b * ks0 + j * ks1 + kh * D; let vj = b * vs0 + j * vs1 + kh * D;
  var dk = 0.0; var dv = 0.0;
  for (var h = kh * group; h < (kh + 1u) * group; h++) {
    for (var i = j; i < S; i++) {
      let q = b * qs0 + i * qs1 + h * D;
      let row = (b * S + i) * H * D + h * D;
      let p = exp(attn_score(q, kj, D, scale) - ld(o4, (b * H + h) * S + i));
      var dp = 0.0; var di = 0.0;
      for (var e = 0u; e < D; e++) {
        dp += ld(o5, row + e) * ld(o2, vj + e);
        di += ld(o5, row + e) * ld(o3, row + e);
      }
      dk += p * (dp - di) * ld(o0, q + d);
      dv += p * ld(o5, row + d);
    }
  }
  st(o6, b * dks0 + j * dks1 + kh * D + d, dk * scale);
  st(o7, b * dvs0 + j * dvs1 + kh * D + d, dv);
}`,
	"xent": `fn body(t: u32) {
  let rows = u(6u); let vocab = u(7u);
  if (t != 0u) { return; }
  var total = 0.0;
  for (var r = 0u; r < rows; r++) {
    var m = NEG;
    for (var v = 0u; v < vocab; v++) { m = max(m, ld(o0, r * vocab + v)); }
    var s = 0.0;
    for (var v = 0u; v < vocab; v++) { s += exp(ld(o0, r * vocab + v) - m); }
    let label = ldi(o1, r);
    var x = 0.0;
    if (label >= 0 && u32(label) < vocab) { x = ld(o0, r * vocab + u32(label)); }
    total += m + log(s) - x;
  }
  st(o2, 0u, total / f32(rows));
}`,
	"xent_bwd": `fn body(t: u32) {
  let rows = u(8u); let vocab = u(9u);
  if (t >= rows * vocab) { return; }
  let r = t / vocab; let c = t % vocab;
  var m = NEG;
  for (var v = 0u; v < vocab; v++) { m = max(m, ld(o0, r * vocab + v)); }
  var s = 0.0;
  for (var v = 0u; v < vocab; v++) { s += exp(ld(o0, r * vocab + v) - m); }
  var g = exp(ld(o0, t) - m) / s;
  if (i32(c) == ldi(o1, r)) { g -= 1.0; }
  st(o3, t, g * ld(o2, 0u) / f32(rows));
}`,
	"reduce_sum": `fn body(t: u32) {
  let rows = u(4u); let n = u(5u);
  if (t >= n) { return; }
  var s = 0.0;
  for (var r = 0u; r < rows; r++) { s += ld(o0, r * n + t); }
  st(o1, t, s);
}`,
	"emb_bwd": `fn body(t: u32) {
  let rows = u(6u); let h = u(7u); let vocab = u(8u);
  if (t >= vocab * h) { return; }
  let v = t / h; let j = t % h;
  var s = 0.0;
  for (var r = 0u; r < rows; r++) {
    if (ldi(o0, r) == i32(v)) { s += ld(o1, r * h + j); }
  }
  st(o2, t, s);
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

// wgslSource returns the whole WGSL module of a kernel.
func wgslSource(name string) (string, bool) {
	body, ok := wgslKernels[name]
	if !ok {
		return "", false
	}
	return wgslPrelude + body + wgslMain, true
}
