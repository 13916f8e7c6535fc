"""Shape and layout ops: views (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout), index
remappings (Transpose, Concat, Slice, Split, Expand, Tile, DepthToSpace, SpaceToDepth) and the
shape-valued ops computed at compile time (Shape, Size, ConstantOfShape, Range).

View ops need no kernel when they stand alone (the compiled model re-labels the buffer), but
inside a fused group they are inlined, so each still returns a compute that reads the
row-major data at the remapped index. Gather / GatherElements live in ``shape_gather``.
"""
from __future__ import annotations

import math

import numpy as np

from minicomp.errors import ModelError, ShapeError
from minicomp.frontend.dtypes import onnx_to_dtype
from minicomp.graph.ops._util import broadcast_shape, dtype_of, load, norm_axis
from minicomp.graph.registry import op
from minicomp.ir.expr import max_, min_, select
from minicomp.ir.ops import NP_DTYPE
from minicomp.ir.te import Tensor


def where(ctx) -> str:
  return f"{ctx.node.op_type} node {ctx.node.name!r}"


def const_ints(ctx, v, what: str, optional: bool = False) -> list[int] | None:
  """The values of a compile-time integer input (None when omitted and ``optional``)."""
  if v is None:
    if optional: return None
    raise ShapeError(f"{where(ctx)}: input {what!r} is required")
  if isinstance(v, Tensor): raise ctx.error(f"input {what!r} must be a constant initializer (it is a runtime tensor)")
  a = np.asarray(v)
  if a.dtype.kind not in "iub":
    raise ModelError(f"{where(ctx)}: input {what!r} must hold integers, got {a.dtype} {a.reshape(-1)[:4].tolist()}")
  return [int(x) for x in a.reshape(-1)]


def empty_like(x: Tensor, shape) -> np.ndarray:
  """An empty part of runtime tensor ``x`` (a Split chunk or a Slice of length 0) as what it is: a constant with no
  values, of ``x``'s type. Concat skips it; any other op that reads it refuses an empty operand by name."""
  return np.empty(tuple(int(d) for d in shape), NP_DTYPE[x.dtype])


def check_positive(ctx, shape) -> tuple[int, ...]:
  shape = tuple(int(d) for d in shape)
  if any(d <= 0 for d in shape):
    raise ctx.error(f"output shape {list(shape)} has a zero-size dim; empty runtime tensors are not supported")
  return shape


def norm_axes(ctx, axes, rank: int) -> list[int]:
  out = [norm_axis(a, rank, where(ctx)) for a in axes]
  if len(set(out)) != len(out): raise ShapeError(f"{where(ctx)}: repeated axes {list(axes)}")
  return out


# ---------------------------------------------------------------------------------------------
# views: row-major index remapping

def reshape_index(in_shape, out_shape, idx) -> list:
  """Input indices reading the row-major element at output index ``idx``.

  Dims of size 1 are dropped, the rest are matched in groups of equal element count, so a
  reshape that only merges or splits dims (or squeezes) gives the simplest index math."""
  ins = [d for d, n in enumerate(in_shape) if n != 1]
  outs = [d for d, n in enumerate(out_shape) if n != 1]
  res: list = [0] * len(in_shape)
  a = b = 0
  while a < len(ins) and b < len(outs):
    ga, gb = [ins[a]], [outs[b]]
    pa, pb = in_shape[ins[a]], out_shape[outs[b]]
    a, b = a + 1, b + 1
    while pa != pb:
      if pa < pb: ga.append(ins[a]); pa *= in_shape[ins[a]]; a += 1
      else: gb.append(outs[b]); pb *= out_shape[outs[b]]; b += 1
    if len(ga) == 1 and len(gb) == 1:
      res[ga[0]] = idx[gb[0]]; continue
    flat = None
    for d in gb: flat = idx[d] if flat is None else flat * out_shape[d] + idx[d]
    stride = pa
    for k, d in enumerate(ga):
      stride //= in_shape[d]
      e = flat // stride if stride > 1 else flat
      res[d] = e % in_shape[d] if k > 0 else e
  return res


def view(ctx, x, shape):
  """``x`` reshaped (row-major) to ``shape``: a numpy reshape for a constant, else a compute."""
  shape = tuple(int(d) for d in shape)
  if not isinstance(x, Tensor): return np.asarray(x).reshape(shape)
  if math.prod(shape) != math.prod(x.shape):
    raise ShapeError(f"{where(ctx)}: cannot reshape {list(x.shape)} ({math.prod(x.shape)} elements) to {list(shape)}")
  check_positive(ctx, shape)
  return ctx.compute(shape, lambda *i: x[tuple(reshape_index(x.shape, shape, i))])


def reshape_target(ctx, in_shape, spec, allowzero: bool) -> tuple[int, ...]:
  """ONNX Reshape's output shape: 0 copies the input dim (unless allowzero), -1 is inferred."""
  out, infer = [], None
  for k, s in enumerate(spec):
    if s == -1:
      if infer is not None: raise ShapeError(f"{where(ctx)}: more than one -1 in shape {spec}")
      infer = k; out.append(1)
    elif s == 0 and not allowzero:
      if k >= len(in_shape): raise ShapeError(f"{where(ctx)}: shape {spec} copies dim {k} of a rank-{len(in_shape)} input")
      out.append(in_shape[k])
    elif s < 0: raise ShapeError(f"{where(ctx)}: invalid dim {s} in shape {spec}")
    else: out.append(s)
  total = math.prod(in_shape)
  if infer is not None:
    known = math.prod(out)
    if known == 0 or total % known: raise ShapeError(f"{where(ctx)}: cannot infer -1 in {spec} for input {list(in_shape)}")
    out[infer] = total // known
  if math.prod(out) != total: raise ShapeError(f"{where(ctx)}: cannot reshape {list(in_shape)} to {spec}")
  return tuple(out)


@op("Reshape", kind="view", since=13)
def reshape(ctx, x, shape):
  """Reshape: constant shape; 0 copies the input dim unless ``allowzero=1`` (opset 14); -1 inferred."""
  spec = const_ints(ctx, shape, "shape")
  return [view(ctx, x, reshape_target(ctx, tuple(x.shape), spec, ctx.flag("allowzero", 0)))]


@op("Flatten", kind="view", since=13)
def flatten(ctx, x):
  """Flatten to 2-D at ``axis`` (default 1; negative counts from the end; 0 gives (1, size))."""
  r, axis = len(x.shape), int(ctx.attr("axis", 1))
  if axis < 0: axis += r
  if not 0 <= axis <= r: raise ShapeError(f"{where(ctx)}: axis {ctx.attr('axis', 1)} out of range for rank {r}")
  return [view(ctx, x, (math.prod(x.shape[:axis]), math.prod(x.shape[axis:])))]


@op("Squeeze", kind="view", since=13)
def squeeze(ctx, x, axes=None):
  """Squeeze (opset 13: axes as an optional input; none given removes every dim of size 1)."""
  ax = const_ints(ctx, axes, "axes", optional=True)
  shape = tuple(x.shape)
  if ax is None: drop = [d for d, n in enumerate(shape) if n == 1]
  else:
    drop = norm_axes(ctx, ax, len(shape))
    bad = [d for d in drop if shape[d] != 1]
    if bad: raise ShapeError(f"{where(ctx)}: cannot squeeze axes {bad} of shape {list(shape)} (size is not 1)")
  return [view(ctx, x, tuple(n for d, n in enumerate(shape) if d not in drop))]


@op("Unsqueeze", kind="view", since=13)
def unsqueeze(ctx, x, axes):
  """Unsqueeze (opset 13: axes as an input, normalised against the output rank)."""
  ax = const_ints(ctx, axes, "axes")
  rank = len(x.shape) + len(ax)
  new = norm_axes(ctx, ax, rank)
  it = iter(x.shape)
  return [view(ctx, x, tuple(1 if d in new else next(it) for d in range(rank)))]


@op("Identity", kind="view", since=13)
def identity(ctx, x):
  """Identity (tensors only; sequences / optionals of opset 14+ are not supported types)."""
  return [view(ctx, x, x.shape)]


@op("Dropout", kind="view", since=13)
def dropout(ctx, x, ratio=None, training_mode=None):
  """Dropout at inference: output = input, the optional mask is all true (a constant).
  ``training_mode`` must be absent or a constant false; ``ratio`` is ignored."""
  if isinstance(training_mode, Tensor): raise ctx.error("input 'training_mode' must be a constant initializer")
  if training_mode is not None and bool(np.asarray(training_mode).reshape(-1)[0]):
    raise ctx.error("training_mode=true (random dropout) is not supported; minicomp compiles inference only")
  if isinstance(ratio, Tensor): raise ctx.error("input 'ratio' must be a constant initializer")
  return [view(ctx, x, x.shape), np.ones(tuple(x.shape), np.bool_)]


# ---------------------------------------------------------------------------------------------
# injective ops

@op("Transpose", kind="injective", since=13)
def transpose(ctx, x):
  """Transpose; ``perm`` defaults to the reversed axes."""
  r = len(x.shape)
  perm = [int(p) for p in ctx.attr("perm", list(range(r))[::-1])]
  if sorted(perm) != list(range(r)): raise ShapeError(f"{where(ctx)}: perm {perm} is not a permutation of {r} axes")
  shape = tuple(x.shape[p] for p in perm)
  if not isinstance(x, Tensor): return [np.transpose(x, perm)]

  def body(*i):
    src = [0] * r
    for k, p in enumerate(perm): src[p] = i[k]
    return x[tuple(src)]
  return [ctx.compute(shape, body)]


@op("Concat", kind="injective", since=13)
def concat(ctx, *xs):
  """Concat along ``axis`` (negative allowed); any number of inputs, constants become weights;
  empty constant inputs are skipped. Each input's read index is clamped to its own extent."""
  xs = [x for x in xs if x is not None]
  r = len(xs[0].shape)
  axis = norm_axis(int(ctx.attr("axis")), r, where(ctx))
  for x in xs:
    if len(x.shape) != r or any(x.shape[d] != xs[0].shape[d] for d in range(r) if d != axis):
      raise ShapeError(f"{where(ctx)}: cannot concatenate shapes {[list(v.shape) for v in xs]} on axis {axis}")
  if not any(isinstance(x, Tensor) for x in xs): return [np.concatenate([np.asarray(x) for x in xs], axis)]
  parts = [ctx.tensor(x) for x in xs if math.prod(x.shape) > 0]
  offs = [0]
  for p in parts: offs.append(offs[-1] + p.shape[axis])
  shape = tuple(offs[-1] if d == axis else xs[0].shape[d] for d in range(r))

  def body(*i):
    def read(k):
      j = i[axis] - offs[k] if k else i[axis]
      if k: j = max_(j, 0)
      if k < len(parts) - 1: j = min_(j, parts[k].shape[axis] - 1)
      return parts[k][tuple(j if d == axis else i[d] for d in range(r))]
    out = read(len(parts) - 1)
    for k in range(len(parts) - 2, -1, -1): out = select(i[axis] < offs[k + 1], read(k), out)
    return out
  return [ctx.compute(shape, body)]


def slice_params(ctx, shape, starts, ends, axes, steps) -> list[tuple[int, int, int]]:
  """(start, step, length) for every axis, with ONNX's negative-index and clamping rules."""
  r = len(shape)
  ax = list(range(len(starts))) if axes is None else norm_axes(ctx, axes, r)
  st = [1] * len(starts) if steps is None else steps
  if not len(starts) == len(ends) == len(ax) == len(st):
    raise ShapeError(f"{where(ctx)}: starts/ends/axes/steps have different lengths")
  out = [(0, 1, n) for n in shape]
  for a, s, e, step in zip(ax, starts, ends, st):
    n = shape[a]
    if step == 0: raise ShapeError(f"{where(ctx)}: step 0 on axis {a}")
    s, e = s + n if s < 0 else s, e + n if e < 0 else e
    if step > 0: s, e = min(max(s, 0), n), min(max(e, 0), n)
    else: s, e = min(max(s, 0), n - 1), min(max(e, -1), n - 1)
    out[a] = (s, step, len(range(s, e, step)))
  return out


@op("Slice", kind="injective", since=13)
def slice_(ctx, x, starts, ends, axes=None, steps=None):
  """Slice with constant starts/ends/axes/steps: negative indices, clamping, negative steps,
  INT64_MAX / INT64_MIN ends."""
  p = slice_params(ctx, tuple(x.shape), const_ints(ctx, starts, "starts"), const_ints(ctx, ends, "ends"),
                   const_ints(ctx, axes, "axes", True), const_ints(ctx, steps, "steps", True))
  if not isinstance(x, Tensor):
    arr = np.asarray(x)
    for d, (s, step, n) in enumerate(p): arr = np.take(arr, s + step * np.arange(n, dtype=np.int64), axis=d)
    return [arr]
  if any(n == 0 for _, _, n in p): return [empty_like(x, [n for _, _, n in p])]
  shape = check_positive(ctx, [n for _, _, n in p])
  return [ctx.compute(shape, lambda *i: x[tuple(i[d] if (s, step) == (0, 1) else s + i[d] * step
                                                 for d, (s, step, _) in enumerate(p))])]


@op("Split", kind="injective", since=13)
def split(ctx, x, sizes=None):
  """Split along ``axis``: sizes from the optional ``split`` input (opset 13), else the
  ``num_outputs`` attribute (opset 18: chunks of ceil(dim / n), the last one smaller), else
  equal parts for the number of outputs."""
  r = len(x.shape)
  axis = norm_axis(int(ctx.attr("axis", 0)), r, where(ctx))
  dim, n_out = x.shape[axis], len(ctx.node.outputs)
  parts = const_ints(ctx, sizes, "split", optional=True)
  if parts is None:
    n = int(ctx.attr("num_outputs", n_out)) if ctx.opset >= 18 else n_out
    if n < 1: raise ShapeError(f"{where(ctx)}: num_outputs={n} must be at least 1")
    if dim % n and ctx.opset < 18: raise ShapeError(f"{where(ctx)}: dim {dim} does not split into {n} equal parts")
    c = -(-dim // n)
    parts = [min(c, dim - k * c) for k in range(n)]
  if len(parts) != n_out or sum(parts) != dim or any(s < 0 for s in parts):
    raise ShapeError(f"{where(ctx)}: split sizes {parts} do not divide dim {dim} into {n_out} outputs")
  outs, off = [], 0
  for k, s in enumerate(parts):
    shape = tuple(s if d == axis else x.shape[d] for d in range(r))
    if not isinstance(x, Tensor): outs.append(np.take(np.asarray(x), np.arange(off, off + s), axis=axis))
    elif s == 0: outs.append(empty_like(x, shape))
    else:
      check_positive(ctx, shape)
      outs.append(ctx.compute(shape, lambda *i, o=off: x[tuple(i[d] + o if d == axis and o else i[d] for d in range(r))],
                              suffix=str(k)))
    off += s
  return outs


@op("Expand", kind="injective", since=13)
def expand(ctx, x, shape):
  """Expand to a constant ``shape`` with two-way numpy broadcasting (the output may keep larger
  input dims, and ``shape`` may have lower rank than the input)."""
  out = broadcast_shape(x.shape, const_ints(ctx, shape, "shape"), where=where(ctx))
  if not isinstance(x, Tensor): return [np.broadcast_to(np.asarray(x), out).copy()]
  check_positive(ctx, out)
  return [ctx.compute(out, lambda *i: load(x, out, i))]


@op("Tile", kind="injective", since=13)
def tile(ctx, x, repeats):
  """Tile with a constant ``repeats`` (one per axis)."""
  rep = const_ints(ctx, repeats, "repeats")
  if len(rep) != len(x.shape) or any(v < 0 for v in rep):
    raise ShapeError(f"{where(ctx)}: repeats {rep} do not fit shape {list(x.shape)}")
  if not isinstance(x, Tensor): return [np.tile(np.asarray(x), rep)]
  shape = check_positive(ctx, [n * v for n, v in zip(x.shape, rep)])
  return [ctx.compute(shape, lambda *i: x[tuple(0 if n == 1 else i[d] if v == 1 else i[d] % n
                                                for d, (n, v) in enumerate(zip(x.shape, rep)))])]


def _block(ctx, x) -> int:
  b = int(ctx.attr("blocksize"))
  if len(x.shape) != 4 or b <= 0: raise ShapeError(f"{where(ctx)}: needs a 4-D NCHW input and blocksize > 0")
  return b


@op("DepthToSpace", kind="injective", since=13)
def depth_to_space(ctx, x):
  """DepthToSpace, modes DCR (default: channel = (bh*b + bw)*C' + c) and CRD (c*b*b + bh*b + bw)."""
  b, mode = _block(ctx, x), ctx.attr("mode", "DCR")
  n, c, h, w = x.shape
  if c % (b * b): raise ShapeError(f"{where(ctx)}: channels {c} not divisible by blocksize^2 = {b * b}")
  if mode not in ("DCR", "CRD"): raise ctx.error(f"mode {mode!r} is not DCR or CRD")
  co = c // (b * b)
  if not isinstance(x, Tensor):
    t = np.asarray(x).reshape((n, b, b, co, h, w) if mode == "DCR" else (n, co, b, b, h, w))
    t = t.transpose((0, 3, 4, 1, 5, 2) if mode == "DCR" else (0, 1, 4, 2, 5, 3))
    return [t.reshape(n, co, h * b, w * b)]

  def body(i, j, y, z):
    bh, bw = y % b, z % b
    ch = (bh * b + bw) * co + j if mode == "DCR" else j * (b * b) + bh * b + bw
    return x[i, ch, y // b, z // b]
  return [ctx.compute((n, co, h * b, w * b), body)]


@op("SpaceToDepth", kind="injective", since=13)
def space_to_depth(ctx, x):
  """SpaceToDepth, modes DCR (default: output channel (bh*b + bw)*C + c reads x[c, y*b + bh, z*b + bw])
  and CRD (opset 28: channel c*b*b + bh*b + bw)."""
  b, mode = _block(ctx, x), ctx.attr("mode", "DCR")
  n, c, h, w = x.shape
  if h % b or w % b: raise ShapeError(f"{where(ctx)}: spatial dims {h}x{w} not divisible by blocksize {b}")
  if mode not in ("DCR", "CRD"): raise ctx.error(f"mode {mode!r} is not DCR or CRD")
  if not isinstance(x, Tensor):
    t = np.asarray(x).reshape(n, c, h // b, b, w // b, b).transpose((0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4))
    return [t.reshape(n, c * b * b, h // b, w // b)]
  if mode == "CRD":
    return [ctx.compute((n, c * b * b, h // b, w // b),
                        lambda i, j, y, z: x[i, j // (b * b), y * b + (j // b) % b, z * b + j % b])]
  return [ctx.compute((n, c * b * b, h // b, w // b),
                      lambda i, j, y, z: x[i, j % c, y * b + j // (b * c), z * b + (j // c) % b])]


# ---------------------------------------------------------------------------------------------
# shape-valued ops (compile-time numpy results)

@op("Shape", kind="injective", since=13)
def shape_(ctx, x):
  """Shape as an int64 array; ``start`` / ``end`` (opset 15) slice it with clamping."""
  s = np.array(x.shape, np.int64)
  return [s[int(ctx.attr("start", 0)):int(ctx.attr("end", len(s)))]]


@op("Size", kind="injective", since=13)
def size(ctx, x):
  """Size: the element count as a 0-d int64 array."""
  return [np.array(math.prod(x.shape), np.int64)]


@op("ConstantOfShape", kind="injective", since=13)
def constant_of_shape(ctx, shape):
  """ConstantOfShape with a constant shape; ``value`` defaults to float32 0."""
  dims = const_ints(ctx, shape, "shape")
  v = np.asarray(ctx.attr("value", np.zeros(1, np.float32))).reshape(-1)
  return [np.full(tuple(dims), v[0], dtype=v.dtype)]


@op("EyeLike", kind="injective", since=9)
def eye_like(ctx, x):
  """EyeLike: ones on the diagonal moved by ``k`` (above it for k > 0), zeros elsewhere, in the shape of the 2-D
  input, whose values are not read (the result is a constant); of type ``dtype`` (an ONNX element type), else the
  input's."""
  if len(x.shape) != 2: raise ShapeError(f"{where(ctx)}: the input must be 2-D, got shape {list(x.shape)}")
  dt = ctx.attr("dtype", None)
  name = onnx_to_dtype(int(dt), where(ctx)) if dt is not None else dtype_of(x)
  return [np.eye(x.shape[0], x.shape[1], int(ctx.attr("k", 0)), dtype=NP_DTYPE[name])]


@op("Range", kind="injective", since=13)
def range_(ctx, start, limit, delta):
  """Range of constant scalars: max(ceil((limit - start) / delta), 0) elements of start's dtype."""
  if any(isinstance(v, Tensor) for v in (start, limit, delta)):
    raise ctx.error("start, limit and delta must be constant initializers (a runtime Range has no static shape)")
  s, l, d = (np.asarray(v).reshape(()) for v in (start, limit, delta))
  if d == 0: raise ShapeError(f"{where(ctx)}: delta is 0")
  n = max(int(np.ceil((l - s) / d)), 0)
  return [(s + d * np.arange(n)).astype(s.dtype)]
