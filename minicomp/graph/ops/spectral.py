"""The discrete Fourier transform (DFT, opsets 17 and 20) and the short-time one (STFT, opset 17) as sums against
constant twiddle factors.

ONNX holds a complex signal as a last dim of 2 (real, imaginary) or a real one as a last dim of 1. The DFT along
``axis`` (an attribute in opset 17, default 1; a constant input in opset 20, default -2) of length N
(``dft_length``, default the axis's length; zero-padded or truncated to it) is, with ``s = -1`` forward and
``+1`` inverse (``inverse``, which also divides by N)::

    out[.., j, re] = sum_m re[m] cos(2 pi j m / N) - s im[m] sin(2 pi j m / N)
    out[.., j, im] = sum_m s re[m] sin(2 pi j m / N) + im[m] cos(2 pi j m / N)

``onesided`` keeps the first N / 2 + 1 outputs of a forward transform; with ``inverse`` it is numpy's ``irfft``:
the input is the first half of a Hermitian spectrum (default N = 2 (L - 1)), the output real (last dim 1), the
terms 0 < k < N / 2 counted twice and the imaginary parts of the first and (even N) the middle one ignored. Every
form is one reduction stage ``sum_m x[.., m, c'] * T[j, m, c', c]`` over a table ``T`` of coefficients computed
at compile time in float64, the structure of a batched matmul (it fuses and is scheduled like one).

The sum is O(N^2) where an FFT is O(N log N), and its rounding grows with N: in float32 an output that should
be 0 among outputs of magnitude 54 (ONNX's test_dft_inverse) comes out 1e-6 away, past the backend tests' 1e-7.
So float32 and float64 signals are summed in float64 (and rounded once to the input's type), half ones in float32.
On GPUs with slow float64 (consumer parts: 1/64 of float32) that costs time on long transforms; nothing here is
an FFT.

STFT (``signal [batch, L, 1 or 2]``, a constant ``frame_step``, an optional ``window`` of W values, constant or
not, an optional constant ``frame_length`` N, default W, else L; ``onesided`` default 1) is the DFT of length N of
each frame ``signal[b, f * frame_step + n] * window[n]``, n < min(W, N), for the ``1 + (L - N) // frame_step``
frames, as ONNX's reference computes it: output ``[batch, frames, bins, 2]``.
"""
from __future__ import annotations

import numpy as np

import minicomp.ir.te as te
from minicomp.errors import ModelError, ShapeError
from minicomp.graph.ops._util import back_to
from minicomp.graph.ops.shape import const_ints, where as _where
from minicomp.graph.registry import op
from minicomp.ir.ops import FLOAT_DTYPES, HALF_DTYPES
from minicomp.ir.te import Tensor


def _scalar(ctx, v, what: str, default):
  """The one integer of a constant input (``default`` when it is omitted)."""
  vals = const_ints(ctx, v, what, optional=True)
  if vals is None: return default
  if len(vals) != 1: raise ModelError(f"{_where(ctx)}: {what} must be one integer, got {vals}")
  return vals[0]


def twiddles(length: int, n: int, inverse: bool, onesided: bool, complex_in: bool) -> np.ndarray:
  """The coefficients ``T[j, m, c', c]`` (float64) of output ``j`` (channel ``c``) on input ``m`` (channel ``c'``)
  for an input of ``length`` values along the axis (module docstring)."""
  if inverse and onesided:        # irfft: real output of length n from the first n // 2 + 1 inputs
    m = np.arange(min(length, n // 2 + 1))
    j = np.arange(n)
    theta = 2 * np.pi * np.outer(j, m) / n
    w = np.where((m == 0) | ((n % 2 == 0) & (m == n // 2)), 1.0, 2.0) / n
    im_used = (m != 0) & ~((n % 2 == 0) & (m == n // 2))
    t = np.zeros((n, len(m), 2 if complex_in else 1, 1))
    t[:, :, 0, 0] = w * np.cos(theta)
    if complex_in: t[:, :, 1, 0] = -w * np.sin(theta) * im_used
    return t
  s = 1.0 if inverse else -1.0
  outs = n // 2 + 1 if onesided and not inverse else n
  m = np.arange(min(length, n))
  theta = 2 * np.pi * np.outer(np.arange(outs), m) / n
  scale = 1.0 / n if inverse else 1.0
  t = np.zeros((outs, len(m), 2 if complex_in else 1, 2))
  t[:, :, 0, 0], t[:, :, 0, 1] = scale * np.cos(theta), scale * s * np.sin(theta)
  if complex_in: t[:, :, 1, 0], t[:, :, 1, 1] = -scale * s * np.sin(theta), scale * np.cos(theta)
  return t


def _transform(ctx, X: Tensor, table: np.ndarray, shape: tuple, read, weight=None) -> list[Tensor]:
  """``out[i] = sum over (m, c') of x * table[j, m, c', i[-1]] (* weight(m))`` where ``(x, j) = read(i, m, c')``:
  ``X``'s element that output ``i`` sums at input position ``m`` and channel ``c'``, and ``i``'s index along the
  transformed dim. Summed in float64 for a float32 or float64 ``X``, in float32 for a half one (module docstring:
  why), rounded once to ``X``'s type."""
  acc = "float32" if X.dtype in HALF_DTYPES else "float64"
  T = ctx.const(table.astype(np.float32 if acc == "float32" else np.float64))
  rm = ctx.reduce_axis(table.shape[1], "rm")
  rc = ctx.reduce_axis(table.shape[2], "rc") if table.shape[2] > 1 else None
  c = 0 if rc is None else rc

  def body(*i):
    x, j = read(i, rm, c)
    e = back_to(x, acc) * T[(j, rm, c, i[-1])]
    if weight is not None: e = e * back_to(weight(rm), acc)
    return te.sum(e, axis=[rm] + ([rc] if rc is not None else []))
  out = ctx.compute(shape, body, ctx.node.op_type.lower())
  return [out] if X.dtype == acc else [ctx.compute(shape, lambda *i: back_to(out[i], X.dtype), "out")]


def _dft(ctx, x, dft_length, axis: int):
  X = ctx.tensor(x)
  if X.dtype not in FLOAT_DTYPES: raise ctx.error(f"input type {X.dtype} is not supported (float only)")
  if X.ndim < 2 or X.shape[-1] not in (1, 2):
    raise ShapeError(f"{_where(ctx)}: input shape {list(X.shape)} must end in 1 (real) or 2 (complex)")
  if not -X.ndim <= axis < X.ndim: raise ModelError(f"{_where(ctx)}: axis {axis} is outside a rank-{X.ndim} input")
  ax = axis % X.ndim
  if ax == X.ndim - 1: raise ModelError(f"{_where(ctx)}: axis {axis} is the real/imaginary dim")
  inverse, onesided = ctx.flag("inverse", 0), ctx.flag("onesided", 0)
  length = int(X.shape[ax])
  n = _scalar(ctx, dft_length, "dft_length", 2 * (length - 1) if inverse and onesided else length)
  if n < 1: raise ModelError(f"{_where(ctx)}: dft_length {n} must be positive")
  table = twiddles(length, n, bool(inverse), bool(onesided), X.shape[-1] == 2)
  shape = (*X.shape[:ax], table.shape[0], *X.shape[ax + 1:-1], table.shape[3])
  return _transform(ctx, X, table, shape, lambda i, m, c: (X[(*i[:ax], m, *i[ax + 1:-1], c)], i[ax]))


@op("DFT", kind="data_reuse", since=17)
def dft_17(ctx, x, dft_length=None):
  """DFT with ``axis`` an attribute (default 1)."""
  return _dft(ctx, x, dft_length, int(ctx.attr("axis", 1)))


@op("DFT", kind="data_reuse", since=20)
def dft_20(ctx, x, dft_length=None, axis=None):
  """DFT with ``axis`` a constant input (default -2)."""
  return _dft(ctx, x, dft_length, _scalar(ctx, axis, "axis", -2))


@op("STFT", kind="data_reuse", since=17)
def stft(ctx, signal, frame_step, window=None, frame_length=None):
  """The short-time Fourier transform (module docstring)."""
  X = ctx.tensor(signal)
  if X.dtype not in FLOAT_DTYPES: raise ctx.error(f"signal type {X.dtype} is not supported (float only)")
  if X.ndim != 3 or X.shape[-1] not in (1, 2):
    raise ShapeError(f"{_where(ctx)}: signal shape {list(X.shape)} must be [batch, length, 1 or 2]")
  step = _scalar(ctx, frame_step, "frame_step", None)
  W = None if window is None else ctx.tensor(window)
  if W is not None and W.ndim != 1: raise ShapeError(f"{_where(ctx)}: window must be 1-D, got {list(W.shape)}")
  length = int(X.shape[1])
  n = _scalar(ctx, frame_length, "frame_length", length if W is None else int(W.shape[0]))
  if step is None or step < 1 or n < 1 or n > length:
    raise ModelError(f"{_where(ctx)}: frame_step {step} and frame_length {n} must be positive, the frame no longer "
                     f"than the signal ({length})")
  frames = 1 + (length - n) // step
  table = twiddles(n if W is None else int(W.shape[0]), n, False, ctx.flag("onesided", 1), X.shape[-1] == 2)
  return _transform(ctx, X, table, (X.shape[0], frames, table.shape[0], 2),
                    lambda i, m, c: (X[(i[0], i[1] * step + m, c)], i[2]), None if W is None else lambda m: W[(m,)])
