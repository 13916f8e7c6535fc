"""Quickstart: a fused matmul + bias + relu, scheduled by hand, compiled with NVRTC and run.

Run:  python examples/quickstart.py
It prints the CUDA C minicomp wrote, the ptxas resource usage, and checks the result against
numpy: on the GPU when one is usable (built for its own arch, target="cuda"), else on the CPU
simulator of the same source (built for sm_86).
"""
import numpy as np

import minicomp as mc
from minicomp import gpu_available, gpu_status

TARGET = "cuda" if gpu_available() else "sm_86"    # "cuda": the arch of GPU 0
print(f"GPU: {gpu_status()}" if gpu_available() else f"no GPU ({gpu_status()}): running on the CPU simulator")

M, N, K = 300, 200, 129      # deliberately not multiples of the tile sizes

# -- the algorithm
A = mc.placeholder((M, K), "float32", name="A")
B = mc.placeholder((K, N), "float32", name="B")
bias = mc.placeholder((N,), "float32", name="bias")
k = mc.reduce_axis(K, name="k")
C = mc.compute((M, N), lambda i, j: mc.sum(A[i, k] * B[k, j], axis=k), name="C")
D = mc.compute((M, N), lambda i, j: mc.max(C[i, j] + bias[j], 0.0), name="D")

# -- how to schedule it: 64x64 block tiles, 16x16 threads with 4x4 results each,
#    A and B tiles staged through shared memory, accumulation in registers
s = mc.Schedule([D])
CL = s.cache_write(C, "local")         # accumulate C in registers ...
s.compute_inline(C)                    # ... and write D straight from them
i, j = s.axis(D)
io, ii = s.split(D, i, 64)
jo, ji = s.split(D, j, 64)
ty, ii = s.split(D, ii, 4)
tx, ji = s.split(D, ji, 4)
s.reorder(D, io, jo, ty, tx, ii, ji)
s.bind(D, io, "blockIdx.y")
s.bind(D, jo, "blockIdx.x")
s.bind(D, ty, "threadIdx.y")
s.bind(D, tx, "threadIdx.x")
s.compute_at(CL, D, tx)
ci, cj, ck = s.loops(CL)
ko, ki = s.split(CL, ck, 8)
s.reorder(CL, ko, ki, ci, cj)
s.unroll(CL, ci)
s.unroll(CL, cj)
for X in (A, B):
  XS = s.cache_read(X, "shared", [CL])
  s.compute_at(XS, CL, ko)
  fused = s.fuse(XS, *s.loops(XS))
  _, t = s.split(XS, fused, 256)
  y, x = s.split(XS, t, 16)
  s.bind(XS, y, "threadIdx.y")
  s.bind(XS, x, "threadIdx.x")

kern = mc.build(s, target=TARGET)
print(kern.source)
print("launch:", kern.launches)
print("resources:", kern.resources)

rng = np.random.default_rng(0)
a = rng.standard_normal((M, K), dtype=np.float32)
b = rng.standard_normal((K, N), dtype=np.float32)
c = rng.standard_normal((N,), dtype=np.float32)
out = kern(a, b, c)                     # the GPU when one is usable, else the CPU simulator
np.testing.assert_allclose(out, np.maximum(a @ b + c, 0), rtol=1e-4, atol=1e-4)
print(f"matches numpy ({'GPU' if gpu_available() else 'CPU simulator'}, {kern.target.arch})")
