package engine

// WGSL twins of the kernels of imported ops (atenkernels.go): the same
// params (operands, one view each, then the kernel's words), the same
// loops and float32 operations in the same order, one invocation t as
// one iteration of the cpu's range loop. erf has no WGSL builtin: the
// twin of GELU's erf form uses erfApprox (|error| ≤ 1.2·10⁻⁷), the cpu
// math.Erf, which the webgpu-vs-cpu tolerance covers as it covers exp.

const wgslAtenCommon = `
struct View { slot: u32, base: u32, dt: u32, rank: u32, off: u32, shape: array<u32, 8>, stride: array<u32, 8> }

fn view(j: u32, n: u32) -> View {
  var v: View;
  v.slot = sl(2u * j); v.base = params[2u * j + 1u];
  let at = 2u * n + 19u * j;
  v.dt = params[at]; v.rank = params[at + 1u]; v.off = params[at + 2u];
  for (var d = 0u; d < 8u; d++) { v.shape[d] = params[at + 3u + d]; v.stride[d] = params[at + 11u + d]; }
  return v;
}
fn xw(n: u32, i: u32) -> u32 { return params[21u * n + i]; }
fn xf(n: u32, i: u32) -> f32 { return bitcast<f32>(params[21u * n + i]); }

fn vat(v: ptr<function, View>, t0: u32) -> u32 {
  var t = t0; var e = (*v).off;
  for (var d = i32((*v).rank) - 1; d >= 0; d--) {
    let s = (*v).shape[d];
    e += (t % s) * (*v).stride[d];
    t /= s;
  }
  return e;
}
fn vget(v: ptr<function, View>, e: u32) -> f32 {
  switch (*v).dt {
    case 0u: { return bitcast<f32>(rd((*v).slot, (*v).base + e)); }
    case 1u: { return f32(bitcast<i32>(rd((*v).slot, (*v).base + e))); }
    case 2u: { return f32(bitcast<i32>(rd((*v).slot, (*v).base + 2u * e))); }
    default: {
      let b = 4u * (*v).base + e;
      return f32((rd((*v).slot, b / 4u) >> (8u * (b % 4u))) & 0xffu);
    }
  }
}
fn vgeti(v: ptr<function, View>, e: u32) -> i32 {
  switch (*v).dt {
    case 0u: { return i32(bitcast<f32>(rd((*v).slot, (*v).base + e))); }
    case 1u: { return bitcast<i32>(rd((*v).slot, (*v).base + e)); }
    case 2u: { return bitcast<i32>(rd((*v).slot, (*v).base + 2u * e)); }
    default: {
      let b = 4u * (*v).base + e;
      return i32((rd((*v).slot, b / 4u) >> (8u * (b % 4u))) & 0xffu);
    }
  }
}
fn vset(v: ptr<function, View>, e: u32, x: f32) {
  switch (*v).dt {
    case 0u: { wr((*v).slot, (*v).base + e, bitcast<u32>(x)); }
    case 1u: { wr((*v).slot, (*v).base + e, bitcast<u32>(i32(x))); }
    case 2u: {
      let i = i32(x);
      wr((*v).slot, (*v).base + 2u * e, bitcast<u32>(i));
      wr((*v).slot, (*v).base + 2u * e + 1u, bitcast<u32>(i >> 31u));
    }
    default: {
      let b = 4u * (*v).base + e;
      let sh = 8u * (b % 4u);
      var y = 0u;
      if (x != 0.0) { y = 1u; if (x > 1.0 && x < 256.0) { y = u32(x); } }
      wr((*v).slot, b / 4u, (rd((*v).slot, b / 4u) & ~(0xffu << sh)) | (y << sh));
    }
  }
}
// span is the elements invocation t writes of an output of n elements:
// t, or the four of word t for a byte output.
fn span(v: ptr<function, View>, n: u32, t: u32) -> vec2<u32> {
  if ((*v).dt == 3u) { return vec2<u32>(4u * t, min(4u * t + 4u, n)); }
  if (t < n) { return vec2<u32>(t, t + 1u); }
  return vec2<u32>(0u, 0u);
}
fn erfApprox(x: f32) -> f32 {
  let z = abs(x);
  let t = 1.0 / (1.0 + 0.5 * z);
  let r = t * exp(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806 +
    t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))));
  return sign(x) * (1.0 - r);
}
fn unaryOp(code: u32, x: f32, a: f32, b: f32) -> f32 {
  switch code {
    case 0u: { return x; }
    case 1u: { if (x > 0.0) { return x; } return 0.0; }
    case 2u: { return 0.5 * x * (1.0 + tanh(GELU_C * (x + 0.044715 * x * x * x))); }
    case 3u: { return 0.5 * x * (1.0 + erfApprox(x / 1.4142135623730951)); }
    case 4u: { return a * x + b; }
    case 5u: { return -x; }
    case 6u: { return exp(x); }
    case 7u: { return log(x); }
    case 8u: { return sqrt(x); }
    case 9u: { return 1.0 / sqrt(x); }
    case 10u: { return 1.0 / (1.0 + exp(-x)); }
    case 11u: { return tanh(x); }
    case 12u: { return x / (1.0 + exp(-x)); }
    case 13u: { return x * min(max(x + 3.0, 0.0), 6.0) / 6.0; }
    case 14u: { return min(max(x + 3.0, 0.0), 6.0) / 6.0; }
    case 15u: { if (x == 0.0) { return 1.0; } return 0.0; }
    default: { return bitcast<f32>(0x7fc00000u); }
  }
}
fn binaryOp(code: u32, x: f32, z: f32, a: f32) -> f32 {
  switch code {
    case 0u: { if (a == 1.0) { return x + z; } return x + a * z; }
    case 1u: { if (a == 1.0) { return x - z; } return x - a * z; }
    case 2u: { return x * z; }
    case 3u: { return x / z; }
    case 4u: { if (z <= a) { return 0.0; } return x; }
    case 5u: {
      let th = tanh(GELU_C * (z + 0.044715 * z * z * z));
      let d = 0.5 * (1.0 + th) + 0.5 * z * (1.0 - th * th) * GELU_C * (1.0 + 3.0 * 0.044715 * z * z);
      return x * d;
    }
    case 6u: {
      let cdf = 0.5 * (1.0 + erfApprox(z / 1.4142135623730951));
      let pdf = exp(-0.5 * z * z) / 2.5066282746310002;
      return x * (cdf + z * pdf);
    }
    case 7u: { if (z != 0.0) { return a; } return x; }
    case 8u: { let s = 1.0 / (1.0 + exp(-z)); return x * (s * (1.0 + z * (1.0 - s))); }
    case 9u: { if (z < -3.0) { return 0.0; } if (z <= 3.0) { return x * (z / 3.0 + 0.5); } return x; }
    case 10u: { if (z > -3.0 && z < 3.0) { return x / 6.0; } return 0.0; }
    case 11u: { return x * z * (1.0 - z); }
    case 12u: { return x * (1.0 - z * z); }
    case 13u: { return a * z - x; }
    default: { return bitcast<f32>(0x7fc00000u); }
  }
}
fn hash32(x0: u32) -> u32 {
  var x = x0;
  x ^= x >> 16u; x *= 0x85ebca6bu; x ^= x >> 13u; x *= 0xc2b2ae35u; x ^= x >> 16u;
  return x;
}
// rowBase is the storage element of row t's first element along dim.
fn rowBase(v: ptr<function, View>, dim: u32, t0: u32) -> u32 {
  var t = t0; var e = (*v).off;
  for (var d = i32((*v).rank) - 1; d >= 0; d--) {
    if (u32(d) == dim) { continue; }
    let s = (*v).shape[d];
    e += (t % s) * (*v).stride[d];
    t /= s;
  }
  return e;
}
fn inner(v: ptr<function, View>) -> u32 {
  var n = 1u;
  for (var d = 2u; d < (*v).rank; d++) { n *= (*v).shape[d]; }
  return n;
}
fn channelOf(v: ptr<function, View>, t: u32) -> u32 { return (t / inner(v)) % (*v).shape[1]; }
fn windowsLo(i: u32, p: u32, k: u32, d: u32, s: u32, n: u32) -> u32 {
  let num = i32(i) + i32(p) - i32((k - 1u) * d);
  if (num < 0) { return 0u; }
  return min(u32((num + i32(s) - 1) / i32(s)), n);
}
fn windowsHi(i: u32, p: u32, s: u32, n: u32) -> u32 { return min((i + p) / s + 1u, n); }
`

// wgslAtenKernels are the bodies of the twins, by kernel.
var wgslAtenKernels = map[string]string{
	"a_unary": `fn body(t: u32) {
  var x = view(0u, 2u); var y = view(1u, 2u);
  let n = xw(2u, 0u); let code = xw(2u, 1u); let a = xf(2u, 2u); let b = xf(2u, 3u);
  let r = span(&y, n, t);
  for (var i = r.x; i < r.y; i++) { vset(&y, vat(&y, i), unaryOp(code, vget(&x, vat(&x, i)), a, b)); }
}`,
	"a_binary": `fn body(t: u32) {
  var x = view(0u, 3u); var z = view(1u, 3u); var y = view(2u, 3u);
  let n = xw(3u, 0u); let code = xw(3u, 1u); let a = xf(3u, 2u);
  let r = span(&y, n, t);
  for (var i = r.x; i < r.y; i++) { vset(&y, vat(&y, i), binaryOp(code, vget(&x, vat(&x, i)), vget(&z, vat(&z, i)), a)); }
}`,
	"a_div_scalar": `fn body(t: u32) {
  var x = view(0u, 2u); var y = view(1u, 2u);
  let n = xw(2u, 0u); let z = xf(2u, 1u);
  let r = span(&y, n, t);
  for (var i = r.x; i < r.y; i++) { vset(&y, vat(&y, i), vget(&x, vat(&x, i)) / z); }
}`,
	"a_fill": `fn body(t: u32) {
  var y = view(0u, 1u);
  let n = xw(1u, 0u); let val = xf(1u, 1u);
  let r = span(&y, n, t);
  for (var i = r.x; i < r.y; i++) { vset(&y, vat(&y, i), val); }
}`,
	"a_arange": `fn body(t: u32) {
  var y = view(0u, 1u);
  let n = xw(1u, 0u); let start = xf(1u, 1u); let step = xf(1u, 2u);
  let r = span(&y, n, t);
  for (var i = r.x; i < r.y; i++) { vset(&y, vat(&y, i), start + f32(i) * step); }
}`,
	"a_triu": `fn body(t: u32) {
  var x = view(0u, 2u); var y = view(1u, 2u);
  let n = xw(2u, 0u); let diag = bitcast<i32>(xw(2u, 1u)); let lower = xw(2u, 2u) != 0u;
  let cols = y.shape[y.rank - 1u]; let rows = y.shape[y.rank - 2u];
  let r = span(&y, n, t);
  for (var i = r.x; i < r.y; i++) {
    let c = i32(i % cols); let rr = i32((i / cols) % rows);
    var val = 0.0;
    if ((!lower && c - rr >= diag) || (lower && c - rr <= diag)) { val = vget(&x, vat(&x, i)); }
    vset(&y, vat(&y, i), val);
  }
}`,
	"a_bernoulli": `fn body(t: u32) {
  var y = view(0u, 1u);
  let n = xw(1u, 0u); let p = xf(1u, 1u);
  let node = xw(1u, 2u); let s0 = xw(1u, 3u); let s1 = xw(1u, 4u); let k0 = xw(1u, 5u); let k1 = xw(1u, 6u);
  let r = span(&y, n, t);
  for (var i = r.x; i < r.y; i++) {
    let h = hash32(s0 ^ hash32(s1 ^ hash32(k0 ^ hash32(k1 ^ hash32(node ^ hash32(i + 0x9e3779b9u))))));
    var val = 0.0;
    if (f32(h >> 8u) / 16777216.0 < p) { val = 1.0; }
    vset(&y, vat(&y, i), val);
  }
}`,
	"a_reduce": `fn body(t: u32) {
  var x = view(0u, 2u); var y = view(1u, 2u);
  let n = xw(2u, 0u); let mask = xw(2u, 1u); let code = xw(2u, 2u); let scale = xf(2u, 3u);
  if (t >= n) { return; }
  var red = 1u;
  for (var d = 0u; d < x.rank; d++) { if ((mask & (1u << d)) != 0u) { red *= x.shape[d]; } }
  var base = x.off; var rem = t;
  for (var d = i32(x.rank) - 1; d >= 0; d--) {
    if ((mask & (1u << u32(d))) != 0u) { continue; }
    let s = x.shape[d]; base += (rem % s) * x.stride[d]; rem /= s;
  }
  var acc = 0.0;
  if (code == 2u) { acc = NEG * 2.0; }
  for (var rr = 0u; rr < red; rr++) {
    var e = base; var q = rr;
    for (var d = i32(x.rank) - 1; d >= 0; d--) {
      if ((mask & (1u << u32(d))) == 0u) { continue; }
      let s = x.shape[d]; e += (q % s) * x.stride[d]; q /= s;
    }
    let val = vget(&x, e);
    if (code == 2u) { acc = max(acc, val); } else { acc += val; }
  }
  if (code == 1u) { acc /= f32(red); } else if (code == 0u && scale != 1.0) { acc *= scale; }
  vset(&y, vat(&y, t), acc);
}`,
	"a_softmax": `fn body(t: u32) {
  var x = view(0u, 2u); var y = view(1u, 2u);
  let rows = xw(2u, 0u); let dim = xw(2u, 1u); let logOut = xw(2u, 2u) != 0u;
  if (t >= rows) { return; }
  let size = x.shape[dim]; let sx = x.stride[dim]; let sy = y.stride[dim];
  let bx = rowBase(&x, dim, t); let by = rowBase(&y, dim, t);
  var m = NEG * 2.0;
  for (var j = 0u; j < size; j++) { m = max(m, vget(&x, bx + j * sx)); }
  var s = 0.0;
  for (var j = 0u; j < size; j++) { s += exp(vget(&x, bx + j * sx) - m); }
  let ls = log(s);
  for (var j = 0u; j < size; j++) {
    let d = vget(&x, bx + j * sx) - m;
    if (logOut) { vset(&y, by + j * sy, d - ls); } else { vset(&y, by + j * sy, exp(d) / s); }
  }
}`,
	"a_softmax_bwd": `fn body(t: u32) {
  var g = view(0u, 3u); var o = view(1u, 3u); var y = view(2u, 3u);
  let rows = xw(3u, 0u); let dim = xw(3u, 1u); let logOut = xw(3u, 2u) != 0u;
  if (t >= rows) { return; }
  let size = g.shape[dim];
  let bg = rowBase(&g, dim, t); let bo = rowBase(&o, dim, t); let by = rowBase(&y, dim, t);
  var s = 0.0;
  for (var j = 0u; j < size; j++) {
    let gj = vget(&g, bg + j * g.stride[dim]);
    if (logOut) { s += gj; } else { s += gj * vget(&o, bo + j * o.stride[dim]); }
  }
  for (var j = 0u; j < size; j++) {
    let gj = vget(&g, bg + j * g.stride[dim]); let oj = vget(&o, bo + j * o.stride[dim]);
    if (logOut) { vset(&y, by + j * y.stride[dim], gj - exp(oj) * s); } else { vset(&y, by + j * y.stride[dim], oj * (gj - s)); }
  }
}`,
	"a_layernorm": `fn body(r: u32) {
  var x = view(0u, 6u); var w = view(1u, 6u); var b = view(2u, 6u); var y = view(3u, 6u); var mean = view(4u, 6u); var rstd = view(5u, 6u);
  let rows = xw(6u, 0u); let h = xw(6u, 1u); let eps = xf(6u, 2u); let hasw = xw(6u, 3u) != 0u; let hasb = xw(6u, 4u) != 0u;
  if (r >= rows) { return; }
  var s = 0.0;
  for (var j = 0u; j < h; j++) { s += vget(&x, vat(&x, r * h + j)); }
  let mu = s / f32(h);
  var q = 0.0;
  for (var j = 0u; j < h; j++) { let d = vget(&x, vat(&x, r * h + j)) - mu; q += d * d; }
  let rs = 1.0 / sqrt(q / f32(h) + eps);
  for (var j = 0u; j < h; j++) {
    var o = (vget(&x, vat(&x, r * h + j)) - mu) * rs;
    if (hasw) { o *= vget(&w, vat(&w, j)); }
    if (hasb) { o += vget(&b, vat(&b, j)); }
    vset(&y, vat(&y, r * h + j), o);
  }
  vset(&mean, vat(&mean, r), mu);
  vset(&rstd, vat(&rstd, r), rs);
}`,
	"a_ln_bwd_x": `fn body(r: u32) {
  var dy = view(0u, 6u); var x = view(1u, 6u); var mean = view(2u, 6u); var rstd = view(3u, 6u); var w = view(4u, 6u); var dx = view(5u, 6u);
  let rows = xw(6u, 0u); let h = xw(6u, 1u); let hasw = xw(6u, 2u) != 0u;
  if (r >= rows) { return; }
  let mu = vget(&mean, vat(&mean, r)); let rs = vget(&rstd, vat(&rstd, r));
  var s1 = 0.0; var s2 = 0.0;
  for (var j = 0u; j < h; j++) {
    var g = vget(&dy, vat(&dy, r * h + j));
    if (hasw) { g *= vget(&w, vat(&w, j)); }
    let xh = (vget(&x, vat(&x, r * h + j)) - mu) * rs;
    s1 += g; s2 += g * xh;
  }
  for (var j = 0u; j < h; j++) {
    var g = vget(&dy, vat(&dy, r * h + j));
    if (hasw) { g *= vget(&w, vat(&w, j)); }
    let xh = (vget(&x, vat(&x, r * h + j)) - mu) * rs;
    vset(&dx, vat(&dx, r * h + j), rs * (g - s1 / f32(h) - xh * s2 / f32(h)));
  }
}`,
	"a_ln_bwd_wb": `fn body(j: u32) {
  var dy = view(0u, 6u); var x = view(1u, 6u); var mean = view(2u, 6u); var rstd = view(3u, 6u); var dw = view(4u, 6u); var db = view(5u, 6u);
  let rows = xw(6u, 0u); let h = xw(6u, 1u); let hasw = xw(6u, 2u) != 0u; let hasb = xw(6u, 3u) != 0u;
  if (j >= h) { return; }
  var sw = 0.0; var sb = 0.0;
  for (var r = 0u; r < rows; r++) {
    let g = vget(&dy, vat(&dy, r * h + j));
    sw += g * (vget(&x, vat(&x, r * h + j)) - vget(&mean, vat(&mean, r))) * vget(&rstd, vat(&rstd, r));
    sb += g;
  }
  if (hasw) { vset(&dw, vat(&dw, j), sw); }
  if (hasb) { vset(&db, vat(&db, j), sb); }
}`,
	"a_embedding": `fn body(t: u32) {
  var tab = view(0u, 3u); var idx = view(1u, 3u); var y = view(2u, 3u);
  let n = xw(3u, 0u); let h = xw(3u, 1u);
  if (t >= n) { return; }
  let r = t / h; let j = t % h;
  let id = vgeti(&idx, vat(&idx, r));
  var val = 0.0;
  if (id >= 0 && u32(id) < tab.shape[0]) { val = vget(&tab, tab.off + u32(id) * tab.stride[0] + j * tab.stride[1]); }
  vset(&y, vat(&y, t), val);
}`,
	"a_emb_bwd": `fn body(j: u32) {
  var dy = view(0u, 3u); var idx = view(1u, 3u); var dt = view(2u, 3u);
  let rows = xw(3u, 0u); let h = xw(3u, 1u); let vocab = xw(3u, 2u); let pad = bitcast<i32>(xw(3u, 3u));
  if (j >= h) { return; }
  for (var r = 0u; r < vocab; r++) { vset(&dt, vat(&dt, r * h + j), 0.0); }
  for (var r = 0u; r < rows; r++) {
    let id = vgeti(&idx, vat(&idx, r));
    if (id < 0 || u32(id) >= vocab || id == pad) { continue; }
    let e = vat(&dt, u32(id) * h + j);
    vset(&dt, e, vget(&dt, e) + vget(&dy, vat(&dy, r * h + j)));
  }
}`,
	"a_nll": `fn body(t: u32) {
  var lp = view(0u, 4u); var tg = view(1u, 4u); var out = view(2u, 4u); var tot = view(3u, 4u);
  let rows = xw(4u, 0u); let classes = xw(4u, 1u); let ignore = bitcast<i32>(xw(4u, 2u)); let reduction = xw(4u, 3u);
  if (t > 0u) { return; }
  var s = 0.0; var count = 0.0;
  for (var r = 0u; r < rows; r++) {
    let c = vgeti(&tg, vat(&tg, r));
    if (c == ignore || c < 0 || u32(c) >= classes) { continue; }
    s -= vget(&lp, vat(&lp, r * classes + u32(c)));
    count += 1.0;
  }
  if (reduction == 1u) { s /= count; }
  vset(&out, vat(&out, 0u), s);
  vset(&tot, vat(&tot, 0u), count);
}`,
	"a_nll_bwd": `fn body(t: u32) {
  var gout = view(0u, 4u); var tg = view(1u, 4u); var tot = view(2u, 4u); var gin = view(3u, 4u);
  let rows = xw(4u, 0u); let classes = xw(4u, 1u); let ignore = bitcast<i32>(xw(4u, 2u)); let reduction = xw(4u, 3u);
  if (t >= rows * classes) { return; }
  var g = vget(&gout, vat(&gout, 0u));
  if (reduction == 1u) { g /= vget(&tot, vat(&tot, 0u)); }
  let r = t / classes; let c = t % classes;
  var val = 0.0;
  let id = vgeti(&tg, vat(&tg, r));
  if (id != ignore && u32(id) == c) { val = -g; }
  vset(&gin, vat(&gin, t), val);
}`,
	"a_im2col": `fn body(t: u32) {
  var x = view(0u, 2u); var cols = view(1u, 2u);
  let N = xw(2u, 0u); let C = xw(2u, 1u); let H = xw(2u, 2u); let W = xw(2u, 3u); let Co = xw(2u, 4u);
  let KH = xw(2u, 5u); let KW = xw(2u, 6u); let Ho = xw(2u, 7u); let Wo = xw(2u, 8u); let SH = xw(2u, 9u); let SW = xw(2u, 10u);
  let PH = xw(2u, 11u); let PW = xw(2u, 12u); let DH = xw(2u, 13u); let DW = xw(2u, 14u); let G = xw(2u, 15u);
  let n0 = xw(2u, 16u); let nimg = xw(2u, 17u); let g = xw(2u, 18u);
  let cin = C / G; let P = Ho * Wo; let kc = cin * KH * KW;
  if (t >= kc * nimg * P) { return; }
  let q = t % (nimg * P); let row = t / (nimg * P);
  let m = q / P; let p = q % P; let oh = p / Wo; let ow = p % Wo;
  let j = row % KW; let i = (row / KW) % KH; let ci = row / (KW * KH);
  let ih = i32(oh * SH + i * DH) - i32(PH); let iw = i32(ow * SW + j * DW) - i32(PW);
  var val = 0.0;
  if (ih >= 0 && ih < i32(H) && iw >= 0 && iw < i32(W)) {
    val = vget(&x, x.off + (n0 + m) * x.stride[0] + (g * cin + ci) * x.stride[1] + u32(ih) * x.stride[2] + u32(iw) * x.stride[3]);
  }
  vset(&cols, cols.off + t, val);
}`,
	"a_col2im": `fn body(t: u32) {
  var dcols = view(0u, 2u); var dx = view(1u, 2u);
  let C = xw(2u, 1u); let H = xw(2u, 2u); let W = xw(2u, 3u);
  let KH = xw(2u, 5u); let KW = xw(2u, 6u); let Ho = xw(2u, 7u); let Wo = xw(2u, 8u); let SH = xw(2u, 9u); let SW = xw(2u, 10u);
  let PH = xw(2u, 11u); let PW = xw(2u, 12u); let DH = xw(2u, 13u); let DW = xw(2u, 14u); let G = xw(2u, 15u);
  let n = xw(2u, 16u); let nimg = xw(2u, 17u); let g = xw(2u, 18u);
  let cin = C / G; let P = Ho * Wo; let NP = nimg * P;
  if (t >= cin * H * W) { return; }
  let iw = t % W; let ih = (t / W) % H; let ci = t / (W * H);
  var s = 0.0;
  for (var i = 0u; i < KH; i++) {
    let num = i32(ih) + i32(PH) - i32(i * DH);
    if (num < 0 || num % i32(SH) != 0 || num / i32(SH) >= i32(Ho)) { continue; }
    let oh = u32(num / i32(SH));
    for (var j = 0u; j < KW; j++) {
      let nw = i32(iw) + i32(PW) - i32(j * DW);
      if (nw < 0 || nw % i32(SW) != 0 || nw / i32(SW) >= i32(Wo)) { continue; }
      let ow = u32(nw / i32(SW));
      s += vget(&dcols, dcols.off + ((ci * KH + i) * KW + j) * NP + n * P + oh * Wo + ow);
    }
  }
  vset(&dx, dx.off + n * dx.stride[0] + (g * cin + ci) * dx.stride[1] + ih * dx.stride[2] + iw * dx.stride[3], s);
}`,
	"a_conv": `fn body(t: u32) {
  var x = view(0u, 3u); var wt = view(1u, 3u); var y = view(2u, 3u);
  let N = xw(3u, 0u); let C = xw(3u, 1u); let H = xw(3u, 2u); let W = xw(3u, 3u); let Co = xw(3u, 4u);
  let KH = xw(3u, 5u); let KW = xw(3u, 6u); let Ho = xw(3u, 7u); let Wo = xw(3u, 8u); let SH = xw(3u, 9u); let SW = xw(3u, 10u);
  let PH = xw(3u, 11u); let PW = xw(3u, 12u); let DH = xw(3u, 13u); let DW = xw(3u, 14u); let G = xw(3u, 15u);
  let cin = C / G; let cout = Co / G;
  if (t >= N * Co * Ho * Wo) { return; }
  let ow = t % Wo; let oh = (t / Wo) % Ho; let co = (t / (Wo * Ho)) % Co; let n = t / (Wo * Ho * Co);
  let g = co / cout;
  var s = 0.0;
  for (var ci = 0u; ci < cin; ci++) {
    for (var i = 0u; i < KH; i++) {
      let ih = i32(oh * SH + i * DH) - i32(PH);
      if (ih < 0 || ih >= i32(H)) { continue; }
      for (var j = 0u; j < KW; j++) {
        let iw = i32(ow * SW + j * DW) - i32(PW);
        if (iw < 0 || iw >= i32(W)) { continue; }
        s += vget(&x, x.off + n * x.stride[0] + (g * cin + ci) * x.stride[1] + u32(ih) * x.stride[2] + u32(iw) * x.stride[3]) *
          vget(&wt, wt.off + co * wt.stride[0] + ci * wt.stride[1] + i * wt.stride[2] + j * wt.stride[3]);
      }
    }
  }
  vset(&y, vat(&y, t), s);
}`,
	"a_conv_bwd_x": `fn body(t: u32) {
  var dy = view(0u, 3u); var wt = view(1u, 3u); var dx = view(2u, 3u);
  let N = xw(3u, 0u); let C = xw(3u, 1u); let H = xw(3u, 2u); let W = xw(3u, 3u); let Co = xw(3u, 4u);
  let KH = xw(3u, 5u); let KW = xw(3u, 6u); let Ho = xw(3u, 7u); let Wo = xw(3u, 8u); let SH = xw(3u, 9u); let SW = xw(3u, 10u);
  let PH = xw(3u, 11u); let PW = xw(3u, 12u); let DH = xw(3u, 13u); let DW = xw(3u, 14u); let G = xw(3u, 15u);
  let cin = C / G; let cout = Co / G;
  if (t >= N * C * H * W) { return; }
  let iw = t % W; let ih = (t / W) % H; let ch = (t / (W * H)) % C; let n = t / (W * H * C);
  let g = ch / cin; let ci = ch % cin;
  var s = 0.0;
  for (var co = g * cout; co < (g + 1u) * cout; co++) {
    for (var i = 0u; i < KH; i++) {
      let num = i32(ih) + i32(PH) - i32(i * DH);
      if (num < 0 || num % i32(SH) != 0) { continue; }
      let oh = num / i32(SH);
      if (oh >= i32(Ho)) { continue; }
      for (var j = 0u; j < KW; j++) {
        let nw = i32(iw) + i32(PW) - i32(j * DW);
        if (nw < 0 || nw % i32(SW) != 0) { continue; }
        let ow = nw / i32(SW);
        if (ow >= i32(Wo)) { continue; }
        s += vget(&dy, dy.off + n * dy.stride[0] + co * dy.stride[1] + u32(oh) * dy.stride[2] + u32(ow) * dy.stride[3]) *
          vget(&wt, wt.off + co * wt.stride[0] + ci * wt.stride[1] + i * wt.stride[2] + j * wt.stride[3]);
      }
    }
  }
  vset(&dx, vat(&dx, t), s);
}`,
	"a_conv_bwd_w": `fn body(t: u32) {
  var dy = view(0u, 3u); var x = view(1u, 3u); var dw = view(2u, 3u);
  let N = xw(3u, 0u); let C = xw(3u, 1u); let H = xw(3u, 2u); let W = xw(3u, 3u); let Co = xw(3u, 4u);
  let KH = xw(3u, 5u); let KW = xw(3u, 6u); let Ho = xw(3u, 7u); let Wo = xw(3u, 8u); let SH = xw(3u, 9u); let SW = xw(3u, 10u);
  let PH = xw(3u, 11u); let PW = xw(3u, 12u); let DH = xw(3u, 13u); let DW = xw(3u, 14u); let G = xw(3u, 15u);
  let cin = C / G; let cout = Co / G;
  if (t >= Co * cin * KH * KW) { return; }
  let j = t % KW; let i = (t / KW) % KH; let ci = (t / (KW * KH)) % cin; let co = t / (KW * KH * cin);
  let g = co / cout;
  let r0 = xw(3u, 16u); let r1 = xw(3u, 17u);
  var s = 0.0;
  if (r0 > 0u) { s = vget(&dw, vat(&dw, t)); }
  for (var r = r0; r < r1; r++) {
    let n = r / Ho; let oh = r % Ho;
    let ih = i32(oh * SH + i * DH) - i32(PH);
    if (ih < 0 || ih >= i32(H)) { continue; }
    for (var ow = 0u; ow < Wo; ow++) {
      let iw = i32(ow * SW + j * DW) - i32(PW);
      if (iw < 0 || iw >= i32(W)) { continue; }
      s += vget(&dy, dy.off + n * dy.stride[0] + co * dy.stride[1] + oh * dy.stride[2] + ow * dy.stride[3]) *
        vget(&x, x.off + n * x.stride[0] + (g * cin + ci) * x.stride[1] + u32(ih) * x.stride[2] + u32(iw) * x.stride[3]);
    }
  }
  vset(&dw, vat(&dw, t), s);
}`,
	"a_bn_stats": `fn body(c: u32) {
  var x = view(0u, 5u); var mean = view(1u, 5u); var invstd = view(2u, 5u); var rm = view(3u, 5u); var rv = view(4u, 5u);
  let channels = xw(5u, 0u); let eps = xf(5u, 1u); let mom = xf(5u, 2u); let update = xw(5u, 3u) != 0u;
  if (c >= channels) { return; }
  let inn = inner(&x); let C = x.shape[1]; let N = x.shape[0];
  var s = 0.0; var count = 0u;
  for (var n = 0u; n < N; n++) { for (var i = 0u; i < inn; i++) { s += vget(&x, vat(&x, (n * C + c) * inn + i)); count++; } }
  let mu = s / f32(count);
  var q = 0.0;
  for (var n = 0u; n < N; n++) { for (var i = 0u; i < inn; i++) { let d = vget(&x, vat(&x, (n * C + c) * inn + i)) - mu; q += d * d; } }
  vset(&mean, vat(&mean, c), mu);
  vset(&invstd, vat(&invstd, c), 1.0 / sqrt(q / f32(count) + eps));
  if (update) {
    vset(&rm, vat(&rm, c), (1.0 - mom) * vget(&rm, vat(&rm, c)) + mom * mu);
    vset(&rv, vat(&rv, c), (1.0 - mom) * vget(&rv, vat(&rv, c)) + mom * q / f32(count - 1u));
  }
}`,
	"a_bn_apply": `fn body(t: u32) {
  var x = view(0u, 6u); var mean = view(1u, 6u); var invstd = view(2u, 6u); var w = view(3u, 6u); var b = view(4u, 6u); var y = view(5u, 6u);
  let n = xw(6u, 0u); let hasw = xw(6u, 1u) != 0u; let hasb = xw(6u, 2u) != 0u;
  if (t >= n) { return; }
  let c = channelOf(&x, t);
  var o = (vget(&x, vat(&x, t)) - vget(&mean, vat(&mean, c))) * vget(&invstd, vat(&invstd, c));
  if (hasw) { o *= vget(&w, vat(&w, c)); }
  if (hasb) { o += vget(&b, vat(&b, c)); }
  vset(&y, vat(&y, t), o);
}`,
	"a_bn_bwd_sums": `fn body(c: u32) {
  var dy = view(0u, 6u); var x = view(1u, 6u); var mean = view(2u, 6u); var invstd = view(3u, 6u); var sdy = view(4u, 6u); var sdyx = view(5u, 6u);
  let channels = xw(6u, 0u);
  if (c >= channels) { return; }
  let mu = vget(&mean, vat(&mean, c)); let is = vget(&invstd, vat(&invstd, c));
  let inn = inner(&dy); let C = dy.shape[1]; let N = dy.shape[0];
  var a = 0.0; var b = 0.0;
  for (var n = 0u; n < N; n++) {
    for (var i = 0u; i < inn; i++) {
      let t = (n * C + c) * inn + i;
      let g = vget(&dy, vat(&dy, t));
      a += g;
      b += g * (vget(&x, vat(&x, t)) - mu) * is;
    }
  }
  vset(&sdy, vat(&sdy, c), a);
  vset(&sdyx, vat(&sdyx, c), b);
}`,
	"a_bn_bwd_x": `fn body(t: u32) {
  var dy = view(0u, 8u); var x = view(1u, 8u); var mean = view(2u, 8u); var invstd = view(3u, 8u);
  var w = view(4u, 8u); var sdy = view(5u, 8u); var sdyx = view(6u, 8u); var dx = view(7u, 8u);
  let n = xw(8u, 0u); let count = f32(xw(8u, 1u)); let hasw = xw(8u, 2u) != 0u;
  if (t >= n) { return; }
  let c = channelOf(&x, t);
  let is = vget(&invstd, vat(&invstd, c));
  let xh = (vget(&x, vat(&x, t)) - vget(&mean, vat(&mean, c))) * is;
  var g = is;
  if (hasw) { g *= vget(&w, vat(&w, c)); }
  vset(&dx, vat(&dx, t), g * (vget(&dy, vat(&dy, t)) - vget(&sdy, vat(&sdy, c)) / count - xh * vget(&sdyx, vat(&sdyx, c)) / count));
}`,
	"a_maxpool": `fn body(t: u32) {
  var x = view(0u, 3u); var y = view(1u, 3u); var idx = view(2u, 3u);
  let N = xw(3u, 0u); let C = xw(3u, 1u); let H = xw(3u, 2u); let W = xw(3u, 3u); let Ho = xw(3u, 4u); let Wo = xw(3u, 5u);
  let KH = xw(3u, 6u); let KW = xw(3u, 7u); let SH = xw(3u, 8u); let SW = xw(3u, 9u);
  let PH = xw(3u, 10u); let PW = xw(3u, 11u); let DH = xw(3u, 12u); let DW = xw(3u, 13u);
  if (t >= N * C * Ho * Wo) { return; }
  let ow = t % Wo; let oh = (t / Wo) % Ho; let nc = t / (Wo * Ho); let n = nc / C; let c = nc % C;
  var best = NEG * 2.0; var arg = -1;
  for (var i = 0u; i < KH; i++) {
    let ih = i32(oh * SH + i * DH) - i32(PH);
    if (ih < 0 || ih >= i32(H)) { continue; }
    for (var j = 0u; j < KW; j++) {
      let iw = i32(ow * SW + j * DW) - i32(PW);
      if (iw < 0 || iw >= i32(W)) { continue; }
      let xv = vget(&x, x.off + n * x.stride[0] + c * x.stride[1] + u32(ih) * x.stride[2] + u32(iw) * x.stride[3]);
      if (xv > best || xv != xv || arg < 0) { best = xv; arg = ih * i32(W) + iw; }
    }
  }
  vset(&y, vat(&y, t), best);
  vset(&idx, vat(&idx, t), f32(arg));
}`,
	"a_maxpool_bwd": `fn body(t: u32) {
  var dy = view(0u, 3u); var idx = view(1u, 3u); var dx = view(2u, 3u);
  let N = xw(3u, 0u); let C = xw(3u, 1u); let H = xw(3u, 2u); let W = xw(3u, 3u); let Ho = xw(3u, 4u); let Wo = xw(3u, 5u);
  let KH = xw(3u, 6u); let KW = xw(3u, 7u); let SH = xw(3u, 8u); let SW = xw(3u, 9u);
  let PH = xw(3u, 10u); let PW = xw(3u, 11u); let DH = xw(3u, 12u); let DW = xw(3u, 13u);
  if (t >= N * C * H * W) { return; }
  let iw = t % W; let ih = (t / W) % H; let nc = t / (W * H); let n = nc / C; let c = nc % C;
  let flat = i32(ih * W + iw);
  var s = 0.0;
  for (var oh = windowsLo(ih, PH, KH, DH, SH, Ho); oh < windowsHi(ih, PH, SH, Ho); oh++) {
    let top = i32(oh * SH) - i32(PH);
    if (i32(ih) < top || i32(ih) > top + i32((KH - 1u) * DH)) { continue; }
    for (var ow = windowsLo(iw, PW, KW, DW, SW, Wo); ow < windowsHi(iw, PW, SW, Wo); ow++) {
      let left = i32(ow * SW) - i32(PW);
      if (i32(iw) < left || i32(iw) > left + i32((KW - 1u) * DW)) { continue; }
      let o = n * dy.stride[0] + c * dy.stride[1] + oh * dy.stride[2] + ow * dy.stride[3];
      let oi = n * idx.stride[0] + c * idx.stride[1] + oh * idx.stride[2] + ow * idx.stride[3];
      if (vgeti(&idx, idx.off + oi) == flat) { s += vget(&dy, dy.off + o); }
    }
  }
  vset(&dx, vat(&dx, t), s);
}`,
}

func init() {
	for name, body := range wgslAtenKernels {
		wgslKernels[name] = wgslAtenCommon + body
	}
}
