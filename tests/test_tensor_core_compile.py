"""What compile does with the tensor cores (graph/tensor_core_schedules.py, compiler._construct): the tensor-core
schedules of matmul-like tasks against numpy in the simulator, where they are not offered, fp16 / TF32 models
compiled onto them (saved, loaded, tuned), a BERT against onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest

import minicomp as mc

TC_WORKLOADS = {
  "matmul": lambda dt: __import__("minicomp.workloads", fromlist=["x"]).matmul(64, 128, 96, dtype=dt),
  "matmul_bias_relu": lambda dt: __import__("minicomp.workloads", fromlist=["x"]).matmul(32, 64, 64, bias_relu=True, dtype=dt),
  "batch_matmul": lambda dt: __import__("minicomp.workloads", fromlist=["x"]).batch_matmul(2, 32, 32, 64, dtype=dt),
  "conv2d": lambda dt: __import__("minicomp.workloads", fromlist=["x"]).conv2d(1, 32, 8, 8, 32, 3, pad=1, dtype=dt,
                                                                               channels_last_weights=True),
}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", sorted(TC_WORKLOADS))
def test_tensor_core_schedules_of_matmul_like_tasks_match_numpy(name, dtype):
  from minicomp.graph.tensor_core_schedules import tensor_core_schedules
  from minicomp.ir.dag import ComputeDAG
  wl = TC_WORKLOADS[name](dtype)
  scheds = tensor_core_schedules(ComputeDAG(wl.outputs), mc.Target("sm_80"))
  assert scheds, f"no tensor-core schedule for {name}"
  ins = wl.random_inputs()
  ref = wl.reference(*[a.astype(np.float32) for a in ins]).astype(np.float64)
  bits = 10 if dtype == "float16" else 7
  for s in scheds:
    k = mc.build(s, target="sm_80")
    assert "mma.sync.aligned.m16n8k16" in k.binary.ptx
    out = k(*ins, device="cpu").astype(np.float64)
    # rounding to the output type (half an ulp) plus the float32 sum (k ulps of the sum of |products|)
    assert np.abs(out - ref).max() <= 2.0 ** -(bits + 1) * np.abs(ref).max() + 1e-3, (name, np.abs(out - ref).max())


LDMATRIX = {"matmul": ("x4", "x2_trans"), "batch_matmul": ("x4", "x2_trans"), "conv2d": ("x4_trans", "x2")}


@pytest.mark.parametrize("name", sorted(LDMATRIX))
def test_fragments_are_read_with_ldmatrix_where_the_layout_allows(name, monkeypatch):
  """compile's tensor-core schedules read both fragments with ldmatrix: A x4 and B x2.trans from row-major tiles,
  and for a convolution (pixels contiguous in its input tile, channels in its channels-last weights) A x4.trans and
  B x2. The same kernel with MINICOMP_LDMATRIX=0 reads element by element and computes the same bits."""
  from minicomp.graph.tensor_core_schedules import tensor_core_schedules
  from minicomp.ir.dag import ComputeDAG
  wl = TC_WORKLOADS[name]("float16")
  ins = wl.random_inputs()
  for s in tensor_core_schedules(ComputeDAG(wl.outputs), mc.Target("sm_80")):
    k = mc.build(s, target="sm_80")
    assert all(f"mc_ldmatrix_{form}(" in k.source for form in LDMATRIX[name]), k.source
    assert "ldmatrix.sync.aligned.m8n8" in k.binary.ptx
    monkeypatch.setenv("MINICOMP_LDMATRIX", "0")
    plain = mc.build(s, target="sm_80")
    monkeypatch.delenv("MINICOMP_LDMATRIX")
    assert "ldmatrix" not in plain.source
    np.testing.assert_array_equal(k(*ins, device="cpu"), plain(*ins, device="cpu"))


def test_a_warp_tile_reads_each_fragment_once_per_k_step():
  """compile's template for a 1024^3 fp16 matmul on an A100 (4 x 4 instructions a warp) reads its fragments ahead of
  the unrolled loops that reuse them (ir/nest.py): one ldmatrix.x4 per A fragment, before the loop over the warp
  tile's columns, and B's fragments into an array over those columns, before the loop over its rows."""
  from minicomp import workloads as W
  from minicomp.graph.tensor_core_schedules import tensor_core_schedules
  from minicomp.ir.dag import ComputeDAG
  wl = W.matmul(1024, 1024, 1024, dtype="float16")
  (s, *_) = tensor_core_schedules(ComputeDAG(wl.outputs), mc.Target("a100"))
  src = mc.build(s, target="a100").source
  assert "unsigned mc_frag_A_shared_0[4];" in src and "mc_ldmatrix_x4(mc_frag_A_shared_0, A_shared + " in src
  assert "unsigned mc_frag_B_shared_1[4][2];" in src and "const unsigned* mma_b = mc_frag_B_shared_1[j_0];" in src
  b, a = src.index("unsigned mc_frag_B_shared_1[4][2];"), src.index("unsigned mc_frag_A_shared_0[4];")
  assert b < src.rindex("for (int i_0 = 0;", 0, a) < a


def test_tf32_fragments_are_rounded_once_per_k_step():
  """A TF32 matmul (precision="tf32") rounds each fragment element once, where the fragment is read ahead, not in
  every instruction that uses it: 96 cvt.rna.tf32 for 64 mma.sync in the A100 template's k-step (384 when each
  instruction rounded its 6 registers), and the kernel computes numpy's product of the tf32-rounded inputs."""
  from minicomp import workloads as W
  from minicomp.graph.tensor_core_schedules import _schedule, plan, tensor_core_schedules
  from minicomp.ir.dag import ComputeDAG
  (s, *_) = tensor_core_schedules(ComputeDAG(W.matmul(1024, 1024, 1024).outputs), mc.Target("a100"), tf32=True)
  ptx = mc.build(s, target="a100").binary.ptx
  assert ptx.count("cvt.rna.tf32.f32") <= 2 * ptx.count("mma.sync"), (ptx.count("cvt.rna.tf32.f32"), ptx.count("mma.sync"))
  wl = W.matmul(128, 128, 64)        # (warp tiles of 2 x 2 instructions: each fragment feeds two)
  dag, tgt = ComputeDAG(wl.outputs), mc.Target("sm_80")
  k = mc.build(_schedule(dag, plan(dag, tgt, tf32=True), 2, 2, 2, 2, tgt), target=tgt)
  assert "unsigned mc_frag_" in k.source and "mc_tf32(" in k.source
  a, b = wl.random_inputs()
  tf = lambda x: ((x.view(np.uint32).astype(np.uint64) + 0x1000) & ~np.uint64(0x1fff)).astype(np.uint32).view(np.float32)  # noqa: E731
  ta, tb = tf(a).astype(np.float64), tf(b).astype(np.float64)
  # the float32 sum of 64 exact products (tf32 x tf32 is exact in float32); unrounded operands would be ~2^-11 off
  assert np.abs(k(a, b, device="cpu") - ta @ tb).max() <= 64 * 2.0 ** -24 * (np.abs(ta) @ np.abs(tb)).max()


def test_the_template_lays_fragments_out_as_ptx_does_and_pads_its_tiles():
  """compile's template for a 1024^3 fp16 matmul (A100, 128 x 128 x 32 per block, 8 warps of 4 x 4 instructions, 2
  pipeline stages): rows of 40 and 136 halves in the shared tiles (32 and 128 plus 16 bytes), a register tile of exactly its 4 x 4 x 4
  accumulators though a lane's rows lie 8 apart, and no shared access worse than 2-way by the static model (8-way in
  the layout it replaced)."""
  from minicomp import workloads as W
  from minicomp.graph.tensor_core_schedules import tensor_core_schedules
  from minicomp.ir.dag import ComputeDAG
  from minicomp.search.static.footprint import data_movement
  tgt = mc.Target("a100")
  (s, *_) = tensor_core_schedules(ComputeDAG(W.matmul(1024, 1024, 1024, dtype="float16").outputs), tgt)
  k = mc.build(s, target=tgt)
  for decl in ("__half A_shared[10240];", "__half B_shared[8704];", "float C_local[64];"):   # (2 x 128 x 40, 2 x 32 x 136)
    assert decl in k.source
  dm = data_movement(k.program.kernels[0], l1_bytes=tgt.device.l1_bytes_per_sm, l2_bytes=tgt.device.l2_bytes)
  assert max(x.bank_conflict or 1.0 for x in dm.accesses if x.scope == "shared") <= 2


def test_a_fragment_whose_rows_are_not_16_byte_aligned_is_read_element_by_element():
  """A tile padded by 4 halves a row (storage_align) has 8-byte aligned rows: ldmatrix cannot read A there (B still
  can), and the kernel computes numpy's product."""
  from minicomp import workloads as W
  from minicomp.graph.tensor_core_schedules import tensor_core_schedules
  from minicomp.ir.dag import ComputeDAG
  wl = W.matmul(128, 256, 64, dtype="float16")
  s = tensor_core_schedules(ComputeDAG(wl.outputs), mc.Target("sm_80"))[0].copy()
  s.storage_align("A.shared", 0, 32, 4)
  k = mc.build(s, target="sm_80")
  assert "mc_ldmatrix_x4" not in k.source and "mc_ldmatrix_x2_trans(mma_b" in k.source
  ins = wl.random_inputs()
  ref = wl.reference(*[a.astype(np.float32) for a in ins]).astype(np.float64)
  assert np.abs(k(*ins, device="cpu").astype(np.float64) - ref).max() <= 2.0 ** -11 * np.abs(ref).max() + 1e-3


def test_tensor_core_schedules_only_where_they_apply():
  from minicomp import workloads as W
  from minicomp.graph.tensor_core_schedules import tensor_core_schedules
  from minicomp.ir.dag import ComputeDAG
  dag = lambda wl: ComputeDAG(wl.outputs)   # noqa: E731
  assert tensor_core_schedules(dag(W.matmul(64, 64, 64)), mc.Target("sm_80")) == []            # float32
  assert tensor_core_schedules(dag(W.matmul(64, 64, 64, dtype="float16")), mc.Target("sm_70")) == []
  assert tensor_core_schedules(dag(W.matmul(64, 64, 64, dtype="bfloat16")), mc.Target("sm_75")) == []
  # k of 8 (half an m16n8k16's): padded, the reduction would double
  assert tensor_core_schedules(dag(W.matmul(64, 64, 8, dtype="float16")), mc.Target("sm_80")) == []
  # tiles past the task's edge are computed whole, but not where that would more than add half its products
  assert tensor_core_schedules(dag(W.matmul(3, 5, 16, dtype="float16")), mc.Target("sm_80")) == []
  assert tensor_core_schedules(dag(W.softmax(64, 128, dtype="float16")), mc.Target("sm_80")) == []
  # a convolution only with channels-last weights (in ONNX's order a k-step's weights lie 9 apart)
  assert tensor_core_schedules(dag(W.conv2d(1, 32, 8, 8, 32, 3, pad=1, dtype="float16")), mc.Target("sm_80")) == []
  on_turing = tensor_core_schedules(dag(W.matmul(64, 64, 64, dtype="float16")), mc.Target("sm_75"))
  assert on_turing and all("m16n8k8_f16" in s.to_json() for s in on_turing)


OVERHANG = {   # tasks no tile of the template divides (the tiles overhang their rows, their columns or both)
  "matmul_100x40x64": lambda W, dt: W.matmul(100, 40, 64, dtype=dt),
  "matmul_197x200x48": lambda W, dt: W.matmul(197, 200, 48, dtype=dt),      # a ViT's tokens; k-steps of 16
  "matmul_100x48x197": lambda W, dt: W.matmul(100, 48, 197, dtype=dt),      # attention's P x V: k padded to 208
  "matmul_bias_relu_130x72x96": lambda W, dt: W.matmul(130, 72, 96, bias_relu=True, dtype=dt),
  "batch_matmul_3x50x24x16": lambda W, dt: W.batch_matmul(3, 50, 24, 16, dtype=dt),
  "conv2d_2x32x10x16_f40": lambda W, dt: W.conv2d(2, 32, 10, 16, 40, 3, pad=1, dtype=dt, channels_last_weights=True),
  # rows of 14 and 7 pixels: 2-D tiles 8 pixels wide, the last overhanging the image's right edge (and its bottom)
  "conv2d_2x32x14x14_f16": lambda W, dt: W.conv2d(2, 32, 14, 14, 16, 3, pad=1, dtype=dt, channels_last_weights=True),
  "conv2d_1x32x7x7_f24": lambda W, dt: W.conv2d(1, 32, 7, 7, 24, 3, pad=1, dtype=dt, channels_last_weights=True),
  "conv1x1_1x64x7x7_f40": lambda W, dt: W.conv2d(1, 64, 7, 7, 40, 1, dtype=dt, channels_last_weights=True),
  # input channels no multiple of 32: k-steps of one instruction (16 channels at one filter tap)
  "conv2d_1x16x12x12_f24": lambda W, dt: W.conv2d(1, 16, 12, 12, 24, 3, pad=1, dtype=dt, channels_last_weights=True),
  "conv2d_1x48x7x7_f16": lambda W, dt: W.conv2d(1, 48, 7, 7, 16, 3, pad=1, dtype=dt, channels_last_weights=True),
}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", sorted(OVERHANG))
def test_tiles_that_overhang_the_task_are_computed_whole_and_stored_within_it(name, dtype):
  """Rows or columns that no tile divides: the warps compute the whole tile on zero-filled operand tiles and store
  only what lies inside the output (lower.py ``_computes_padding``). Against numpy in the simulator, for sm_80
  (cp.async) and sm_75 (synchronous fetches, m16n8k8). The rows are no multiple of a warp's 16 (the convolution's
  10 rows of pixels no multiple of the 4 a 2 x 2-warp tile takes)."""
  from minicomp import workloads as W
  from minicomp.graph.tensor_core_schedules import plan, tensor_core_schedules
  from minicomp.ir.dag import ComputeDAG
  wl = OVERHANG[name](W, dtype)
  ins = wl.random_inputs(seed=3)
  ref = wl.reference(*[a.astype(np.float32) for a in ins]).astype(np.float64)
  bits = 10 if dtype == "float16" else 7
  for arch in ("sm_80", "sm_75") if dtype == "float16" else ("sm_80",):
    dag = ComputeDAG(wl.outputs)
    p = plan(dag, mc.Target(arch))
    assert (p.row_ext[-2] % 4 or p.row_ext[-1] % 8 if p.two_d else p.rows % 16), "no overhang: the tiles divide it"
    scheds = tensor_core_schedules(dag, mc.Target(arch))
    assert scheds
    for s in scheds:
      k = mc.build(s, target=arch)
      assert "mma.sync.aligned" in k.binary.ptx
      out = k(*ins, device="cpu").astype(np.float64)
      assert np.abs(out - ref).max() <= 2.0 ** -(bits + 1) * np.abs(ref).max() + 1e-3, (name, arch)


@pytest.mark.parametrize("kind", ["matmul", "batch_matmul"])
def test_random_overhanging_tiles_match_numpy(kind, monkeypatch):
  """Random tile configurations on random sizes that no tile need divide (rows 9-150, columns 5-100, k 16-100: k
  padded to whole instructions), random arch of sm_75 / sm_80 / sm_86 / sm_90, against numpy in the simulator;
  sizes whose padding the template refuses (over MAX_PADDING) are drawn again. 16 built per kind."""
  import zlib
  import minicomp.graph.tensor_core_schedules as T
  from minicomp import workloads as W
  from minicomp.ir.dag import ComputeDAG
  rng = np.random.default_rng(zlib.crc32(kind.encode()))
  built = 0
  while built < 16:
    cfg = tuple(int(x) for x in rng.integers(1, 3, 4))
    monkeypatch.setattr(T, "CONFIGS", (cfg,))
    m, n, k = int(rng.integers(9, 151)), int(rng.integers(5, 101)), int(rng.integers(16, 101))
    wl = W.matmul(m, n, k, dtype="float16") if kind == "matmul" else W.batch_matmul(2, m, n, k, dtype="float16")
    arch = str(rng.choice(["sm_75", "sm_80", "sm_86", "sm_90"]))
    scheds = T.tensor_core_schedules(ComputeDAG(wl.outputs), mc.Target(arch))
    if not scheds: continue
    kern = mc.build(scheds[0], target=arch)
    assert "mma.sync.aligned" in kern.binary.ptx
    ins = wl.random_inputs(seed=int(rng.integers(1 << 30)))
    ref = wl.reference(*[a.astype(np.float32) for a in ins]).astype(np.float64)
    out = kern(*ins, device="cpu").astype(np.float64)
    assert np.abs(out - ref).max() <= 2.0 ** -11 * np.abs(ref).max() + 1e-3, (kind, cfg, m, n, k, arch)
    built += 1


def test_an_overhanging_tile_is_fetched_with_zeros_and_never_reads_past_the_tensor():
  """A 100 x 40 x 64 fp16 matmul in 16 x 8 tiles: rows 100-111 of A's last tile are zeros. On sm_80 each 16-byte
  fetch is one cp.async whose condition is the row bound (false: zeros, the source not read); on sm_75 the copy runs
  only under that condition and zeros are stored otherwise; no vector load of A is issued outside it. The loop-IR
  interpreter, which raises on reading shared memory nothing wrote, computes numpy's result."""
  from minicomp import workloads as W
  from minicomp.graph.tensor_core_schedules import tensor_core_schedules
  from minicomp.ir.dag import ComputeDAG
  from minicomp.ir.interp import run_program
  wl = W.matmul(100, 40, 64, dtype="float16")
  ins = wl.random_inputs(seed=0)
  ref = wl.reference(*[a.astype(np.float32) for a in ins]).astype(np.float64)
  for arch in ("sm_80", "sm_75"):
    (s,) = tensor_core_schedules(ComputeDAG(wl.outputs), mc.Target(arch))
    src = mc.build(s, target=arch).source
    a_fetch = [line for line in src.splitlines()
               if "reinterpret_cast<const uint4*>(A +" in line or "mc_cp_async_16(A" in line]
    if arch == "sm_80":
      assert a_fetch and all(line.rstrip().endswith("< 100);  // A_shared_ax0_ax1_fused_2: vectorized")
                             for line in a_fetch), a_fetch
    else:
      lines = src.splitlines()
      at = lines.index(next(line for line in lines if "reinterpret_cast<const uint4*>(A +" in line))
      assert "< 100) {" in lines[at - 2] and "mc_zero" in "\n".join(lines[at:at + 5])
    got = np.asarray(run_program(s.lower(), *ins), np.float64)
    assert np.abs(got - ref).max() <= 2.0 ** -11 * np.abs(ref).max() + 1e-3


def test_pixel_tiles_past_the_image_edge_never_read_past_the_input():
  """A 3 x 3 convolution on 7 x 7 pixels (padding 1) in 2-D tiles 8 pixels wide: the last column of tiles lies past
  the padded input's right edge. Its shared tiles store zeros there and the loop-IR interpreter, which raises on
  reading memory nothing wrote, computes numpy's result; the tiles were 8 wide (the plan's 2-D rows)."""
  from minicomp import workloads as W
  from minicomp.graph.tensor_core_schedules import plan, tensor_core_schedules
  from minicomp.ir.dag import ComputeDAG
  from minicomp.ir.interp import run_program
  wl = W.conv2d(1, 32, 7, 7, 16, 3, pad=1, dtype="float16", channels_last_weights=True)
  ins = wl.random_inputs(seed=1)
  ref = wl.reference(*[a.astype(np.float32) for a in ins]).astype(np.float64)
  dag = ComputeDAG(wl.outputs)
  assert plan(dag, mc.Target("sm_80")).two_d
  (s, *_) = tensor_core_schedules(dag, mc.Target("sm_80"))
  got = np.asarray(run_program(s.lower(), *ins), np.float64)
  assert np.abs(got - ref).max() <= 2.0 ** -11 * np.abs(ref).max() + 1e-3


@pytest.mark.parametrize("batch, rows", [(1, 197), (2, 197), (2, 100)])
def test_row_axes_that_do_not_fuse_evenly_are_tiled_one_by_one(batch, rows):
  """A (batch, tokens) matmul whose tokens are no multiple of 16: an axis of extent 1 and the outer row axes go
  to the blocks, so a lane's box is its 2 x 2 accumulators (fused with the tokens, bound inference sized it to all
  197 rows, or could not size it at all), and the tokens' tiles overhang them. Against numpy in the simulator."""
  from minicomp.graph.tensor_core_schedules import plan, tensor_core_schedules
  from minicomp.ir.dag import ComputeDAG
  A = mc.placeholder((batch, rows, 64), "float16", name="A")
  B = mc.placeholder((64, 40), "float16", name="B")
  k = mc.reduce_axis(64, name="k")
  C = mc.compute((batch, rows, 40), lambda b, i, j: mc.sum(A[b, i, k] * B[k, j], axis=k), name="C")
  dag = ComputeDAG([C])
  assert plan(dag, mc.Target("sm_80")).classes == ("batch", "row", "col")
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((batch, rows, 64)).astype(np.float16), rng.standard_normal((64, 40)).astype(np.float16)
  ref = np.einsum("bik,kj->bij", a.astype(np.float64), b.astype(np.float64))
  scheds = tensor_core_schedules(dag, mc.Target("sm_80"))
  assert scheds
  for sched in scheds:
    kern = mc.build(sched, target="sm_80")
    (acc,) = [x for x in kern.program.kernels[0].allocs if x.scope == "local"]
    assert int(acc.size.arg) <= 64            # the accumulators: a lane's part of its warp tile, not all the rows
    out = kern(a, b, device="cpu").astype(np.float64)
    assert np.abs(out - ref).max() <= 2.0 ** -11 * np.abs(ref).max() + 1e-3


def test_a_1x1_convolution_on_a_14x14_image_runs_on_the_tensor_cores(tmp_path, monkeypatch):
  """A ResNet-50 bottleneck's 1 x 1 convolution at 14 x 14 (196 pixels, no multiple of 16; each row of 14 pixels a
  tile of 16) in fp16, against numpy."""
  monkeypatch.setenv("MINICOMP_CACHE_DIR", str(tmp_path))
  monkeypatch.setenv("MINICOMP_TENSOR_CORES", "always")
  rng = np.random.default_rng(0)
  model, w, b = _conv(64, 32, 14, np.float16, rng, k=1)
  cm = mc.compile(model, target="sm_80", progress=False, jobs=1)
  assert cm.stats.tensor_cores == 1
  x = rng.standard_normal((1, 64, 14, 14)).astype(np.float16)
  out = cm.run({"x": x}, device="cpu")[0].astype(np.float64)
  ref = np.maximum(np.einsum("fc,chw->fhw", w[:, :, 0, 0].astype(np.float64), x[0].astype(np.float64))
                   + b.astype(np.float64)[:, None, None], 0)[None]
  assert np.abs(out - ref).max() <= 2.0 ** -11 * np.abs(ref).max() + 1e-3


def test_compile_puts_a_matmul_of_197_rows_on_the_tensor_cores(tmp_path, monkeypatch):
  """A ViT's 197 tokens (no tile of 16 rows divides them) in fp16: MatMul+Add+Relu on the tensor cores, against
  numpy."""
  monkeypatch.setenv("MINICOMP_CACHE_DIR", str(tmp_path))
  monkeypatch.setenv("MINICOMP_TENSOR_CORES", "always")
  model, w, b = _mlp(197, 64, 96, np.float16, np.random.default_rng(0))
  cm = mc.compile(model, target="sm_80", progress=False, jobs=1)
  assert cm.stats.tensor_cores == 1
  x = np.random.default_rng(1).standard_normal((197, 64)).astype(np.float16)
  out = cm.run({"x": x}, device="cpu")[0].astype(np.float64)
  ref = np.maximum(x.astype(np.float64) @ w.astype(np.float64) + b.astype(np.float64), 0)
  assert np.abs(out - ref).max() <= 2.0 ** -11 * np.abs(ref).max() + 1e-3


def _gelu_matmul(dtype: str, second_output: bool = False):
  """C = A @ B + bias, then GELU's x * 0.5 * (erf(x / sqrt 2) + 1): the biased product read by two stages that meet
  again (a diamond, as BERT's FFN has it); with ``second_output`` the biased product is an output too."""
  A, B = mc.placeholder((32, 64), dtype, name="A"), mc.placeholder((64, 64), dtype, name="B")
  bias = mc.placeholder((64,), dtype, name="bias")
  k = mc.reduce_axis(64, "k")
  C = mc.compute((32, 64), lambda i, j: mc.sum(A[i, k] * B[k, j], axis=k), name="C")
  X = mc.compute((32, 64), lambda i, j: C[i, j] + bias[j], name="X")
  H = mc.compute((32, 64), lambda i, j: X[i, j] * 0.5, name="H")
  E = mc.compute((32, 64), lambda i, j: mc.erf(X[i, j] * 0.7071067811865476) + 1.0, name="E")
  G = mc.compute((32, 64), lambda i, j: H[i, j] * E[i, j], name="G")
  return (A, B, bias), ([G, X] if second_output else [G])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_gelu_epilogue_that_reads_the_product_twice_stays_on_the_tensor_cores(dtype):
  """BERT's FFN (MatMul + bias + GELU) went to the FP32 pipes while the epilogue had to be a chain of single-consumer
  stages; its diamond is inlined into the template now and computes numpy's result (a second output is refused)."""
  from math import erf
  from minicomp.graph.tensor_core_schedules import tensor_core_schedules
  from minicomp.ir.dag import ComputeDAG
  from minicomp.ir.ops import NP_DTYPE
  assert tensor_core_schedules(ComputeDAG(_gelu_matmul(dtype, second_output=True)[1]), mc.Target("sm_80")) == []
  _, outs = _gelu_matmul(dtype)
  scheds = tensor_core_schedules(ComputeDAG(outs), mc.Target("sm_80"))
  assert scheds
  rng = np.random.default_rng(0)
  ins = [(rng.standard_normal(shape) / 4).astype(NP_DTYPE[dtype]) for shape in ((32, 64), (64, 64), (64,))]
  a, b, c = (x.astype(np.float64) for x in ins)
  x = a @ b + c
  want = x * 0.5 * (np.vectorize(erf)(x * 0.7071067811865476) + 1.0)
  bits = 10 if dtype == "float16" else 7
  for s in scheds:
    k = mc.build(s, target="sm_80")
    assert "mma.sync.aligned.m16n8k16" in k.binary.ptx
    out = k(*ins, device="cpu").astype(np.float64)
    # the half-typed epilogue rounds each stage's result: a few half ulps of the largest value
    assert np.abs(out - want).max() <= 4 * 2.0 ** -bits * np.abs(want).max(), np.abs(out - want).max()


def _mlp(m: int, k: int, n: int, dtype, rng):
  """An ONNX MatMul+Add+Relu of x[m, k] with constant W[k, n] and b[n] in ``dtype`` (numpy); (model, W, b)."""
  from onnx import helper, numpy_helper
  from minicomp.frontend.dtypes import DTYPE_TO_ONNX
  w, b = rng.standard_normal((k, n)).astype(dtype), rng.standard_normal((n,)).astype(dtype)
  elem = DTYPE_TO_ONNX[np.dtype(dtype).name]
  g = helper.make_graph(
    [helper.make_node("MatMul", ["x", "W"], ["y"]), helper.make_node("Add", ["y", "b"], ["z"]),
     helper.make_node("Relu", ["z"], ["o"])], "mlp",
    [helper.make_tensor_value_info("x", elem, [m, k])], [helper.make_tensor_value_info("o", elem, [m, n])],
    [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")])
  return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), w, b


def _fp16_mlp():
  return _mlp(64, 256, 128, np.float16, np.random.default_rng(0))


def test_compile_puts_an_fp16_matmul_on_the_tensor_cores(tmp_path, monkeypatch):
  """The static model estimates the tensor-core schedule of an fp16 MatMul+Add+Relu faster than Gensor's FP32
  ones on an A100: compile keeps it (pipelined), the summary says so, and the model computes what numpy does, also
  saved and loaded."""
  monkeypatch.setenv("MINICOMP_CACHE_DIR", str(tmp_path))
  monkeypatch.setenv("MINICOMP_SCHEDULE_CACHE", "1")
  model, w, b = _fp16_mlp()
  cm = mc.compile(model, target="sm_80", progress=False, jobs=1)
  assert cm.stats.tensor_cores == 1 and "fp16/fp32 tensor cores" in cm.summary()
  assert any("mc_cp_async_commit();" in (k.source or "") for k in cm.kernels)     # (its tiles fetched ahead)
  x = np.random.default_rng(1).standard_normal((64, 256)).astype(np.float16)
  out = cm.run({"x": x}, device="cpu")[0]
  ref = np.maximum(x.astype(np.float64) @ w.astype(np.float64) + b.astype(np.float64), 0)
  assert np.abs(out.astype(np.float64) - ref).max() <= 2.0 ** -11 * np.abs(ref).max() + 1e-3
  # saved and loaded (the kernel text calls the helpers, holds no asm), it computes the same
  loaded = mc.load(cm.save(tmp_path / "saved"))
  again = loaded.run({"x": x}, device="cpu")[0]
  np.testing.assert_array_equal(again, out)
  assert "tensor cores" in loaded.summary()
  # computed in float32 (precision="fp32" widens the model), it is not offered tensor cores (that takes "tf32")
  assert mc.compile(model, target="sm_80", progress=False, jobs=1, precision="fp32").stats.tensor_cores == 0
  monkeypatch.setenv("MINICOMP_TENSOR_CORES", "0")        # the switch: FP32 pipes only (the schedule cache apart)
  off = mc.compile(model, target="sm_80", progress=False, jobs=1)
  assert off.stats.tensor_cores == 0 and "tensor cores" not in off.summary()


def test_compile_builds_the_tiles_the_analytic_model_ranks_first_and_every_split_k_one(tmp_path, monkeypatch):
  """Of the template's tiles for a task, compile builds (NVRTC) and estimates in full only the one the analytic model
  estimates fastest, lowered once; a split-K schedule always. The FFN matmuls of an fp16 BERT-base layer on the H100
  have two tiles and a split-K schedule each."""
  from minicomp import zoo
  from minicomp.codegen.kernel import Builds
  from minicomp.compiler import _tensor_core_options, model_tasks
  from minicomp.graph.tensor_core_schedules import is_split_k, tensor_core_schedules
  from minicomp.search.static.analytic import schedule_seconds
  monkeypatch.setenv("MINICOMP_CACHE_DIR", str(tmp_path))
  tgt = mc.Target("h100")
  model, _ = zoo.bert_tiny(s=128, layers=1, d=768, heads=12, ff=3072)
  task = next(t for t, _ in model_tasks(model, tgt, precision="fp16") if "Erf" in t.ops)   # (768 -> 3072, GELU)
  scheds = tensor_core_schedules(task.dag, tgt)
  tiles = [s for s in scheds if not is_split_k(s)]
  assert len(tiles) == 2 and len(scheds) == 3
  secs = [schedule_seconds(s, tgt) for s in tiles]
  assert all(0 < x < 1e-3 for x in secs) and secs[0] != secs[1]
  import minicomp.codegen.kernel as K
  lowered, lower = [], K.lower_checked
  monkeypatch.setattr(K, "lower_checked", lambda s, *a: lowered.append(s) or lower(s, *a))
  built = Builds(tgt)
  got = [s for _, s, how in _tensor_core_options(task, built, "t", "half")]
  assert [x.to_json() for x in got] == [tiles[secs.index(min(secs))].to_json(), scheds[-1].to_json()]
  assert len(built._kernels) == 2 and len(lowered) == 3     # (the two tiles to rank them, the split-K one to build it)


def test_a_tensor_core_schedule_below_the_fp32_floor_is_kept_without_constructing(tmp_path, monkeypatch, caplog):
  """BERT-base's FFN matmul (128 x 768 x 3072, fp16, MatMul+Add+Relu here) on the H100: its tensor-core schedule is
  estimated below what any FP32-pipe kernel of its 302 million multiply-adds could be (the calibrated FP32 weight
  times the pipes' peak), so compile keeps it without Gensor's walk or the rules' kernel. A 64 x 256 x 128 one on
  the A100 is not (the floor is 3.2 us, the launch and 0.2 us of FMAs): Gensor constructs, the static model compares."""
  import logging
  monkeypatch.setenv("MINICOMP_CACHE_DIR", str(tmp_path))
  monkeypatch.setenv("MINICOMP_SCHEDULE_CACHE", "0")
  model, _, _ = _mlp(128, 768, 3072, np.float16, np.random.default_rng(0))
  with caplog.at_level(logging.INFO, logger="minicomp"):
    cm = mc.compile(model, target="h100", progress=False, jobs=1)
  assert cm.stats.tensor_cores == 1 and cm.stats.constructed == 0 and cm.stats.construct == 0
  assert "beats any FP32-pipe one" in caplog.text
  caplog.clear()
  model, _, _ = _fp16_mlp()
  with caplog.at_level(logging.INFO, logger="minicomp"):
    cm = mc.compile(model, target="sm_80", progress=False, jobs=1)
  assert cm.stats.tensor_cores == 1 and cm.stats.construct > 0 and "beats any FP32-pipe one" not in caplog.text
  # integer products: an FP32-pipe kernel takes four a dp4a, so the floor does not hold and is not asked
  from types import SimpleNamespace
  from minicomp import workloads as W
  from minicomp.compiler import CompileStats, _below_fp32_floor
  task = SimpleNamespace(dag=mc.ComputeDAG(W.matmul(4096, 4096, 4096, dtype="int8").outputs), key="int8")
  assert _below_fp32_floor(task, [(None, None, "tensor cores")], mc.Target("h100"), CompileStats()) is None


def test_tensor_cores_always_keeps_them_where_the_static_model_prefers_the_fp32_pipes(tmp_path, monkeypatch):
  """A small fp16 MatMul+Add+Relu (16 x 64 x 64) goes to the FP32 pipes by the static model on sm_86;
  ``MINICOMP_TENSOR_CORES=always`` keeps its tensor-core schedule (the schedule cache keeps the two choices apart:
  switched back, the FP32 kernel again), which computes numpy's result."""
  monkeypatch.setenv("MINICOMP_CACHE_DIR", str(tmp_path))
  monkeypatch.setenv("MINICOMP_SCHEDULE_CACHE", "1")
  model, w, b = _mlp(16, 64, 64, np.float16, np.random.default_rng(0))
  assert mc.compile(model, target="sm_86", progress=False, jobs=1).stats.tensor_cores == 0
  monkeypatch.setenv("MINICOMP_TENSOR_CORES", "always")
  cm = mc.compile(model, target="sm_86", progress=False, jobs=1)
  assert cm.stats.tensor_cores == 1 and cm.stats.constructed == 0
  x = np.random.default_rng(1).standard_normal((16, 64)).astype(np.float16)
  ref = np.maximum(x.astype(np.float64) @ w.astype(np.float64) + b.astype(np.float64), 0)
  out = cm.run({"x": x}, device="cpu")[0].astype(np.float64)
  assert np.abs(out - ref).max() <= 2.0 ** -11 * np.abs(ref).max() + 1e-3
  monkeypatch.delenv("MINICOMP_TENSOR_CORES")
  assert mc.compile(model, target="sm_86", progress=False, jobs=1).stats.tensor_cores == 0


@pytest.mark.parametrize("name, kwargs, precision", [("bert_tiny", {}, "fp16"), ("bert_tiny", {}, "bf16"),
                                                    ("resnet18", {"hw": 32}, "tf32")])
def test_zoo_models_with_every_layer_the_tensor_cores_take_on_them_match_onnxruntime(name, kwargs, precision,
                                                                                      tmp_path, monkeypatch):
  """Issue 47's model test: with ``MINICOMP_TENSOR_CORES=always`` every task a tensor-core schedule exists for runs
  on one (BERT-tiny's six matmul tasks; ResNet-18's convolutions the template takes, one of them a one-warp kernel
  whose threads have more than 64 copies in flight, which the simulator refused until 2026-12-02), and the model
  agrees with onnxruntime's float32 run within 4 of the precision's epsilons of the output's largest value."""
  import onnxruntime as ort
  from minicomp import zoo
  from minicomp.graph.tensor_core_schedules import tensor_core_schedules
  monkeypatch.setenv("MINICOMP_CACHE_DIR", str(tmp_path))
  monkeypatch.setenv("MINICOMP_TENSOR_CORES", "always")
  model, feeds = getattr(zoo, name)(**kwargs)
  cm = mc.compile(model, target="sm_86", precision=precision, progress=False, jobs=1)
  takes = sum(bool(tensor_core_schedules(t.dag, cm.target, tf32=precision == "tf32")) for t in cm.tasks)
  assert takes >= 3 and cm.stats.tensor_cores == takes
  got = cm.run(feeds, device="cpu")[0].astype(np.float64)
  want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
  eps = 2.0 ** -7 if precision == "bf16" else 2.0 ** -10
  assert np.abs(got - want).max() <= 4 * eps * np.abs(want).max()


def test_precision_tf32_puts_fp32_matmuls_on_tf32_tensor_cores(tmp_path, monkeypatch):
  """``precision="tf32"``: an fp32 MatMul+Add+Relu (256 x 256 x 512, where the static model finds TF32 faster on an
  A100) runs on m16n8k8.tf32, within TF32's rounding of numpy; without it, or on sm_75 (no TF32), the FP32 pipes."""
  monkeypatch.setenv("MINICOMP_CACHE_DIR", str(tmp_path))
  rng = np.random.default_rng(0)
  model, w, b = _mlp(256, 256, 512, np.float32, rng)
  cm = mc.compile(model, target="sm_80", precision="tf32", progress=False, jobs=1)
  assert cm.stats.tensor_cores == 1 and "fp32/tf32 tensor cores" in cm.summary()
  assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in cm.kernels[0].binary.ptx
  x = rng.standard_normal((256, 256)).astype(np.float32)
  out = np.asarray(cm.run({"x": x}, device="cpu")[0], np.float64)
  exact = np.maximum(x.astype(np.float64) @ w + b, 0)
  bound = 2.0 ** -10 * (np.abs(x.astype(np.float64)) @ np.abs(w.astype(np.float64)))   # two operands at 2^-11 each
  assert (np.abs(out - exact) <= bound + 1e-5).all()
  assert np.abs(out - exact).max() > 1e-4          # (rounded: not the float32 result)
  assert mc.compile(model, target="sm_80", progress=False, jobs=1).stats.tensor_cores == 0
  assert mc.compile(model, target="sm_75", precision="tf32", progress=False, jobs=1).stats.tensor_cores == 0


def test_an_fp16_bert_runs_its_matmuls_on_tensor_cores_and_matches_onnxruntime(tmp_path, monkeypatch):
  """The zoo's BERT-tiny (2 layers, s128) in float16 for sm_80: the static model puts 6 of its 12 tasks on the
  tensor cores; the whole model against onnxruntime's float16 run (tolerance of tests/test_precision.py)."""
  from minicomp import zoo
  from onnx_harness import run_ort, to_half
  monkeypatch.setenv("MINICOMP_CACHE_DIR", str(tmp_path))
  model, feeds = zoo.bert_tiny()
  half = to_half(model)
  hfeeds = {k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in feeds.items()}
  cm = mc.compile(half, target="sm_80", progress=False, jobs=1)
  assert cm.stats.tensor_cores >= 4
  got, ref = cm.run(hfeeds, device="cpu")[0].astype(np.float32), run_ort(half, hfeeds)[0].astype(np.float32)
  assert np.abs(got - ref).max() <= 4 * 2.0 ** -10 * np.abs(ref).max()


def test_tuning_starts_from_a_tensor_core_default(tmp_path, monkeypatch):
  """A few trials of Ansor on the fp16 MLP for sm_80: the tuner starts from the tensor-core default (a schedule
  with a tensorize step in the records), keeps it unless a trial beats it, and the model stays correct."""
  monkeypatch.setenv("MINICOMP_CACHE_DIR", str(tmp_path))
  model, w, b = _fp16_mlp()
  log = tmp_path / "tune.jsonl"
  cm = mc.compile(model, target="sm_80", trials=4, strategy="ansor", log_file=str(log), progress=False, jobs=1)
  assert cm.stats.tensor_cores == 1 and '"tensorize"' in log.read_text()
  x = np.random.default_rng(2).standard_normal((64, 256)).astype(np.float16)
  out = np.asarray(cm.run({"x": x}, device="cpu")[0], np.float64)
  ref = np.maximum(x.astype(np.float64) @ w.astype(np.float64) + b.astype(np.float64), 0)
  assert np.abs(out - ref).max() <= 2.0 ** -11 * np.abs(ref).max() + 1e-3


def test_cli_precision_tf32(tmp_path):
  """``minicomp compile --precision tf32``: the summary shows the TF32 tensor-core kernel."""
  import subprocess
  import sys

  import onnx
  onnx.save(_mlp(256, 256, 512, np.float32, np.random.default_rng(0))[0], str(tmp_path / "mm.onnx"))
  r = subprocess.run([sys.executable, "-m", "minicomp.cli", "compile", str(tmp_path / "mm.onnx"), "-q", "--target", "sm_80",
                      "--precision", "tf32", "-o", str(tmp_path / "out")], capture_output=True, text=True,
                     env={**__import__("os").environ, "MINICOMP_CACHE_DIR": str(tmp_path / "cache"), "MINICOMP_JOBS": "1"})
  assert r.returncode == 0, r.stderr
  assert "fp32/tf32 tensor cores" in r.stdout


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("kind", ["matmul", "batch_matmul", "conv2d"])
def test_random_tensor_core_schedules_match_numpy(kind, dtype, monkeypatch):
  """Random tile configurations (warps 1-2 x 1-2, warp tiles 1-2 x 1-2 instructions) on random shapes that fit
  them, built for a random one of sm_80 / sm_86 / sm_90: PTX holds mma.sync, ptxas keeps within 255 registers
  without spills, and the simulator's result is numpy's (22 samples per kind and type, seeded: 66 per type, as
  issue 47 asks 64; about 0.35 s each)."""
  import minicomp.graph.tensor_core_schedules as T
  from minicomp import workloads as W
  from minicomp.ir.dag import ComputeDAG
  import zlib
  rng = np.random.default_rng(zlib.crc32(f"{kind}-{dtype}".encode()))
  bits = 10 if dtype == "float16" else 7
  for _ in range(22):
    wm, wn, mi, ni = (int(x) for x in rng.integers(1, 3, 4))
    monkeypatch.setattr(T, "CONFIGS", ((wm, wn, mi, ni),))
    rows, cols = 16 * wm * mi * int(rng.integers(1, 3)), 8 * wn * ni * int(rng.integers(1, 3))
    k = 32 * int(rng.integers(1, 3))
    if kind == "matmul": wl = W.matmul(rows, cols, k, dtype=dtype)
    elif kind == "batch_matmul": wl = W.batch_matmul(2, rows, cols, k, dtype=dtype)
    else:                      # output pixels (2 wm mi) x 8: one block's 2-D tile of rows; k = 32 channels x 3 x 3
      wl = W.conv2d(1, 32, 2 * wm * mi, 8, cols, 3, pad=1, dtype=dtype, channels_last_weights=True)
    arch = str(rng.choice(["sm_80", "sm_86", "sm_90"]))
    scheds = T.tensor_core_schedules(ComputeDAG(wl.outputs), mc.Target(arch))
    assert scheds, (kind, dtype, wm, wn, mi, ni, rows, cols, k)
    kern = mc.build(scheds[0], target=arch)
    assert "mma.sync.aligned.m16n8k16" in kern.binary.ptx
    res = next(iter(kern.binary.resources.values()))
    assert res.registers <= 255 and res.spill_stores == 0
    ins = wl.random_inputs(seed=int(rng.integers(1 << 30)))
    ref = wl.reference(*[a.astype(np.float32) for a in ins]).astype(np.float64)
    out = kern(*ins, device="cpu").astype(np.float64)
    assert np.abs(out - ref).max() <= 2.0 ** -(bits + 1) * np.abs(ref).max() + 1e-3, (kind, wm, wn, mi, ni)


def _conv(c: int, f: int, hw: int, dtype, rng, group: int = 1, k: int = 3, stride: int = 1):
  """An ONNX Conv (pads 1 for k = 3) + bias + Relu on x[1, c, hw, hw] in ``dtype``; (model, W, b)."""
  from onnx import helper, numpy_helper
  from minicomp.frontend.dtypes import DTYPE_TO_ONNX
  w = (rng.standard_normal((f, c // group, k, k)) * 0.2).astype(dtype)
  b = (rng.standard_normal((f,)) * 0.2).astype(dtype)
  elem = DTYPE_TO_ONNX[np.dtype(dtype).name]
  g = helper.make_graph(
    [helper.make_node("Conv", ["x", "W", "b"], ["y"], pads=[k // 2] * 4, group=group, strides=[stride] * 2),
     helper.make_node("Relu", ["y"], ["o"])], "conv",
    [helper.make_tensor_value_info("x", elem, [1, c, hw, hw])],
    [helper.make_tensor_value_info("o", elem, [1, f, hw // stride, hw // stride])],
    [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")])
  return helper.make_model(g, opset_imports=[helper.make_opsetid("", 22)]), w, b   # (Conv takes bfloat16 from 22)


def test_channels_last_weights_only_for_convolutions_the_tensor_cores_take():
  """graph/layout.py stores a Conv's weights (O, K.., I) when group is 1, the filter is larger than 1 x 1, the
  input channels are a multiple of 16 (an instruction's k), the type has an mma.sync on the target, strides are 1
  and output rows a multiple of 8 pixels or padded to one within MAX_PADDING (14 and 7 pixels; not 4 or 5); else
  unchanged."""
  from minicomp.frontend.onnx_import import load_onnx
  from minicomp.graph.layout import channels_last_weights
  rng = np.random.default_rng(0)

  def stored(model, target="sm_80", tf32=False):
    g = channels_last_weights(load_onnx(model), mc.Target(target), tf32)
    return g.values["W"].layout
  assert stored(_conv(32, 16, 8, np.float16, rng)[0]) == (0, 2, 3, 1)
  assert stored(_conv(32, 16, 8, np.float16, rng)[0], "sm_70") is None              # no mma.sync used there
  assert stored(_conv(16, 16, 8, np.float16, rng)[0]) == (0, 2, 3, 1)               # 16 channels: one instruction's k
  assert stored(_conv(8, 16, 8, np.float16, rng)[0]) is None                        # 8: not
  assert stored(_conv(64, 16, 8, np.float16, rng, group=2)[0]) is None
  assert stored(_conv(32, 16, 8, np.float16, rng, k=1)[0]) is None                  # 1 x 1: already channels-last
  assert stored(_conv(32, 16, 8, np.float32, rng)[0]) is None                       # float32 ...
  assert stored(_conv(32, 16, 8, np.float32, rng)[0], tf32=True) == (0, 2, 3, 1)    # ... unless on TF32
  assert stored(_conv(32, 16, 16, np.float16, rng, stride=2)[0]) is None             # strided: the template loses
  assert stored(_conv(32, 16, 4, np.float16, rng)[0]) is None                        # rows of 4 pixels: no 2-D tiles
  assert stored(_conv(32, 16, 14, np.float16, rng)[0]) == (0, 2, 3, 1)               # 14 pixels: 2-D tiles of 16
  assert stored(_conv(32, 16, 7, np.float16, rng)[0]) == (0, 2, 3, 1)                # 7 pixels: tiles of 8
  assert stored(_conv(32, 16, 5, np.float16, rng)[0]) is None                        # 5 in tiles of 8: too much padding


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "tf32"])
def test_compile_puts_a_convolution_on_the_tensor_cores(dtype, tmp_path, monkeypatch):
  """A Conv 3x3 + bias + Relu (64 -> 64 channels, 16 x 16) for sm_80, in float16, bfloat16, or float32 with
  precision="tf32": its weights are stored channels-last, the static model keeps the tensor-core schedule, and
  the model computes numpy's convolution (of the same half inputs) within half an output ulp plus float32's sum
  (TF32: 2^-10 of the sum of |products|); saved and loaded, the same. Without tensor cores the weights keep ONNX's
  order."""
  import ml_dtypes
  from minicomp.workloads import conv2d_ref
  monkeypatch.setenv("MINICOMP_CACHE_DIR", str(tmp_path))
  np_dtype = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "tf32": np.float32}[dtype]
  rng = np.random.default_rng(0)
  model, w, b = _conv(64, 64, 16, np_dtype, rng)
  precision = "tf32" if dtype == "tf32" else None
  cm = mc.compile(model, target="sm_80", progress=False, jobs=1, precision=precision)
  assert cm.stats.tensor_cores == 1 and "tensor cores" in cm.summary()
  assert "mma.sync.aligned.m16n8k" + ("8" if dtype == "tf32" else "16") in cm.kernels[0].binary.ptx
  (weight,) = [a for a in cm.weights.values() if a.ndim == 4]
  np.testing.assert_array_equal(weight, w.transpose(0, 2, 3, 1))
  x = rng.standard_normal((1, 64, 16, 16)).astype(np_dtype)
  out = cm.run({"x": x}, device="cpu")[0].astype(np.float64)
  f64 = lambda a: a.astype(np.float64)   # noqa: E731
  ref = np.maximum(conv2d_ref(f64(x), f64(w), 1, 1, 1).astype(np.float64) + f64(b)[None, :, None, None], 0)
  if dtype == "tf32":
    bound = 2.0 ** -10 * conv2d_ref(np.abs(f64(x)), np.abs(f64(w)), 1, 1, 1).astype(np.float64) + 1e-4
    assert (np.abs(out - ref) <= bound).all() and np.abs(out - ref).max() > 1e-4     # rounded: not float32's result
  else:
    bits = 10 if dtype == "float16" else 7
    assert np.abs(out - ref).max() <= 2.0 ** -(bits + 1) * np.abs(ref).max() + 1e-3
  loaded = mc.load(cm.save(tmp_path / "saved"))
  np.testing.assert_array_equal(loaded.run({"x": x}, device="cpu")[0].astype(np.float64), out)
  monkeypatch.setenv("MINICOMP_TENSOR_CORES", "0")
  off = mc.compile(model, target="sm_80", progress=False, jobs=1, precision=precision)
  assert off.stats.tensor_cores == 0
  assert any(a.shape == w.shape for a in off.weights.values())


def test_the_tensor_core_sketch_only_where_the_template_applies():
  """generate_sketches adds one ``tensor_core_tiling`` sketch (warps, warp tile, k-step, fetch widths and, for a
  matmul on sm_80+, pipeline stages as choices) for a half matmul or channels-last convolution on sm_80, none for
  float32, sm_70 or ONNX's weight order."""
  from minicomp import workloads as W
  from minicomp.search.sketch import generate_sketches

  def tc(wl, arch="sm_80"):
    return [s for s in generate_sketches(wl.outputs, arch) if "tensor_core_tiling" in s.rules]
  (mm,) = tc(W.matmul(64, 128, 96, dtype="float16"))
  assert {c.var for c in mm.choices} == {"tc_wm", "tc_wn", "tc_mi", "tc_ni", "tc_ksteps", "tc_A_shared_vec",
                                        "tc_B_shared_vec", "tc_stages"}
  (conv,) = tc(W.conv2d(1, 32, 8, 8, 32, 3, pad=1, dtype="bfloat16", channels_last_weights=True))
  assert "tc_stages" not in {c.var for c in conv.choices}     # (its taps are not pipelined: the k-step is a choice)
  (mm75,) = tc(W.matmul(64, 128, 96, dtype="float16"), "sm_75")
  assert "tc_stages" not in {c.var for c in mm75.choices}     # (no cp.async before sm_80)
  assert tc(W.matmul(64, 128, 96)) == [] and tc(W.matmul(64, 128, 96, dtype="float16"), "sm_70") == []
  assert tc(W.conv2d(1, 32, 8, 8, 32, 3, pad=1, dtype="float16")) == []


@pytest.mark.parametrize("kind", ["matmul", "conv2d"])
def test_tensor_core_sketch_samples_match_numpy(kind):
  """Random draws of the tensor-core sketch (the annotator's: invalid ones, tiles that do not divide, redrawn) build
  with mma.sync, a matmul's pipelined, and compute numpy's result in the simulator."""
  from minicomp import workloads as W
  from minicomp.search.annotate import sample_population
  from minicomp.search.sketch import generate_sketches
  wl = W.matmul(64, 128, 96, dtype="float16") if kind == "matmul" else \
      W.conv2d(1, 32, 8, 8, 32, 3, pad=1, dtype="float16", channels_last_weights=True)
  (sk,) = [s for s in generate_sketches(wl.outputs, "sm_80") if "tensor_core_tiling" in s.rules]
  pop = sample_population([sk], 3, np.random.default_rng(1), "sm_80")
  assert len(pop) == 3 and len({c.key for c in pop}) == 3
  # blocks of other warp counts than the template's 2 x 2 (the block tile is a choice: warps x warp tile)
  more = sample_population([sk], 24, np.random.default_rng(2), "sm_80")
  pop += [next(c for c in more if c.values["tc_wm"] * c.values["tc_wn"] == w) for w in (1, 8)]
  ins = wl.random_inputs()
  ref = wl.reference(*[a.astype(np.float32) for a in ins]).astype(np.float64)
  for c in pop:
    kern = mc.build(c.schedule, target="sm_80")
    assert "mma.sync.aligned.m16n8k16" in kern.binary.ptx
    # a matmul's tiles are fetched ahead (its drawn stages); a convolution's k-steps lie inside its filter taps
    assert (f"mc_cp_async_wait<{c.values.get('tc_stages', 2) - 2}>();" in kern.source) == (kind == "matmul")
    assert kern.plan.launches[0].block[0] == 32 * c.values["tc_wm"] * c.values["tc_wn"]
    out = kern(*ins, device="cpu").astype(np.float64)
    assert np.abs(out - ref).max() <= 2.0 ** -11 * np.abs(ref).max() + 1e-3, c.values


def test_random_search_measures_tensor_core_programs(tmp_path):
  """Tuning a half matmul for sm_80 (random search, 8 static-model measurements) draws tensor-core programs from the
  sketch beside the FP32 ones: the log holds both, each estimated."""
  import json
  from minicomp import workloads as W
  from minicomp.graph.tasks import Task, task_kind, workload_key
  from minicomp.ir.dag import ComputeDAG
  from minicomp.search.tune import tune_tasks
  dag = ComputeDAG(W.matmul(128, 128, 128, dtype="float16").outputs)
  task = Task(workload_key(dag), dag, task_kind(dag), 1, ["MatMul"], dag.flop_count())
  log = tmp_path / "tune.jsonl"
  tune_tasks([task], "sm_80", trials=8, strategy="random", log_file=str(log), measurer="static", measures_per_round=8,
             seed=3)
  recs = [json.loads(line) for line in log.read_text().splitlines()]
  tc = ['"tensorize"' in json.dumps(r["steps"]) for r in recs]
  assert len(recs) == 8 and any(tc) and not all(tc)
  assert all(r["error"] == "ok" and r["cost_s"] > 0 for r in recs)


SPLIT = {   # small outputs of long reductions: a split-K candidate (partial sums in chunks, a kernel adding them)
  "conv2d_1x64x7x7_f32": lambda W, dt: W.conv2d(1, 64, 7, 7, 32, 3, pad=1, dtype=dt, channels_last_weights=True),
  "matmul_bias_relu_64x48x256": lambda W, dt: W.matmul(64, 48, 256, bias_relu=True, dtype=dt),
  "batch_matmul_2x32x16x128": lambda W, dt: W.batch_matmul(2, 32, 16, 128, dtype=dt),
}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", sorted(SPLIT))
def test_a_split_reduction_on_the_tensor_cores_matches_numpy(name, dtype, monkeypatch):
  """The split-K candidate (``_split_choice``, ``_split``): two kernels, the first tensorized over chunks of the
  reduction's longest axis (float32 partial sums), the second adding them with the epilogue (bias, ReLU). Against
  numpy in the simulator, for sm_80 (cp.async) and, in float16, sm_75. (Sizes the simulator runs quickly, so the
  blocks aimed at and a chunk's least products are lowered for them to be split.)"""
  import minicomp.graph.tensor_core_schedules as T
  from minicomp import workloads as W
  from minicomp.graph.tensor_core_schedules import tensor_core_schedules
  from minicomp.ir.dag import ComputeDAG
  monkeypatch.setattr(T, "SPLIT_BLOCKS_PER_SM", 0.1)
  monkeypatch.setattr(T, "SPLIT_MIN_K", 64)
  wl = SPLIT[name](W, dtype)
  ins = wl.random_inputs(seed=5)
  ref = wl.reference(*[a.astype(np.float32) for a in ins]).astype(np.float64)
  bits = 10 if dtype == "float16" else 7
  for arch in ("sm_80", "sm_75") if dtype == "float16" else ("sm_80",):
    split = [s for s in tensor_core_schedules(ComputeDAG(wl.outputs), mc.Target(arch)) if len(s.lower().kernels) == 2]
    assert len(split) == 1, "one split-K candidate"
    k = mc.build(split[0], target=arch)
    assert "mma.sync.aligned" in k.binary.ptx and ".rf" in str(split[0])
    out = k(*ins, device="cpu").astype(np.float64)
    assert np.abs(out - ref).max() <= 2.0 ** -(bits + 1) * np.abs(ref).max() + 1e-3, (name, arch)


def test_split_k_only_where_the_tiles_leave_sms_idle():
  """``_split_choice`` on the H100 (132 SMs): ResNet's 3 x 3 convolution on 7 x 7 x 512 and BERT-base's FFN matmul
  are split into at most SPLIT_MAX_CHUNKS chunks of whole k-steps, into at least 1.5 blocks an SM; a 4096^3 matmul,
  whose tiles fill the GPU, is not."""
  import dataclasses
  from minicomp import workloads as W
  from minicomp.graph import tensor_core_schedules as T
  from minicomp.ir.dag import ComputeDAG
  tgt = mc.Target("h100")

  def choice(wl):
    dag = ComputeDAG(wl.outputs)
    p = T.plan(dag, tgt)
    return p, T._split_choice(dag, p, tgt)
  for wl, k in ((W.conv2d(1, 512, 7, 7, 512, 3, pad=1, dtype="float16", channels_last_weights=True), 512),
                (W.matmul(128, 768, 3072, dtype="float16"), 3072)):
    p, (q, cfg) = choice(wl)
    assert 2 <= q.split <= T.SPLIT_MAX_CHUNKS and (k // q.split) % T.KSTEP == 0
    assert dataclasses.replace(p, batch=p.batch * q.split).blocks(*cfg) >= 1.5 * 132 > p.blocks(*cfg)
  assert choice(W.matmul(4096, 4096, 4096, dtype="float16"))[1] is None


def test_compile_runs_saves_and_replays_a_split_k_kernel(tmp_path, monkeypatch):
  """An fp16 MatMul+Add+Relu (32 x 256 x 48) whose only tensor-core candidate is the split-K one (the unsplit
  ones switched off, the thresholds lowered for its small size), kept with ``MINICOMP_TENSOR_CORES=always``: two
  kernels for the task (partial sums, then their sum with bias and ReLU), numpy's result; saved and loaded the
  same; compiled again, replayed from the schedule cache (the partial sums' stage ``.rf`` renamed with the task's
  stages) to the same kernels."""
  import minicomp.graph.tensor_core_schedules as T
  monkeypatch.setenv("MINICOMP_CACHE_DIR", str(tmp_path))
  monkeypatch.setenv("MINICOMP_SCHEDULE_CACHE", "1")
  monkeypatch.setenv("MINICOMP_TENSOR_CORES", "always")
  monkeypatch.setattr(T, "MAX_CANDIDATES", 0)
  monkeypatch.setattr(T, "SPLIT_BLOCKS_PER_SM", 0.1)
  monkeypatch.setattr(T, "SPLIT_MIN_K", 64)
  model, w, b = _mlp(32, 256, 48, np.float16, np.random.default_rng(0))
  cm = mc.compile(model, target="sm_80", progress=False, jobs=1)
  (k,) = cm.kernels
  assert cm.stats.tensor_cores == 1 and [n for n, _, _ in k.launches] == ["task0_matmul_rf", "task0_relu"]
  assert "mma.sync.aligned" in k.binary.ptx
  x = np.random.default_rng(1).standard_normal((32, 256)).astype(np.float16)
  out = cm.run({"x": x}, device="cpu")[0]
  ref = np.maximum(x.astype(np.float64) @ w.astype(np.float64) + b.astype(np.float64), 0)
  assert np.abs(out.astype(np.float64) - ref).max() <= 2.0 ** -11 * np.abs(ref).max() + 1e-3
  np.testing.assert_array_equal(mc.load(cm.save(tmp_path / "saved")).run({"x": x}, device="cpu")[0], out)
  again = mc.compile(model, target="sm_80", progress=False, jobs=1)
  assert again.stats.cached == 1 and [k.source for k in again.kernels] == [k.source for k in cm.kernels]


def test_the_split_k_sketch_samples_match_numpy(monkeypatch):
  """Where compile's template offers split-K, generate_sketches adds a second tensor-core sketch on the reduction
  split the same way (its rules name ``tensor_core_split_k``; compile's construction walks neither); random draws
  build two kernels and compute numpy's result in the simulator. (A size the simulator runs quickly, the thresholds
  lowered for it to be split; BERT-base's FFN matmul on the H100 gets it as it is.)"""
  import minicomp.graph.tensor_core_schedules as T
  from minicomp import workloads as W
  from minicomp.compiler import constructed_sketches
  from minicomp.search.annotate import sample_population
  from minicomp.search.sketch import generate_sketches
  big = [s.rules for s in generate_sketches(W.matmul(128, 768, 3072, dtype="float16").outputs, "h100")]
  assert ("tensor_core_tiling", "tensor_core_split_k") in big
  monkeypatch.setattr(T, "SPLIT_BLOCKS_PER_SM", 0.1)
  monkeypatch.setattr(T, "SPLIT_MIN_K", 64)
  wl = W.matmul(32, 48, 256, bias_relu=True, dtype="float16")
  (sk,) = [s for s in generate_sketches(wl.outputs, "sm_80") if "tensor_core_split_k" in s.rules]
  assert not any("tensor_core_tiling" in s.rules for s in constructed_sketches(wl.outputs, mc.Target("sm_80")))
  ins = wl.random_inputs()
  ref = wl.reference(*[a.astype(np.float32) for a in ins]).astype(np.float64)
  for c in sample_population([sk], 3, np.random.default_rng(4), "sm_80"):
    kern = mc.build(c.schedule, target="sm_80")
    assert len(kern.launches) == 2 and "mma.sync.aligned.m16n8k16" in kern.binary.ptx
    out = kern(*ins, device="cpu").astype(np.float64)
    assert np.abs(out - ref).max() <= 2.0 ** -11 * np.abs(ref).max() + 1e-3, c.values


@pytest.mark.parametrize("kind", ["matmul", "batch_matmul", "conv2d"])
def test_random_split_k_schedules_match_numpy(kind):
  """Split-K on random sizes (rows and pixels no tile need divide: rows 9-100, images of 5-16 pixels a side),
  random tile configurations, 2-8 chunks of whole k-steps, random arch of sm_75 / sm_80 / sm_86 / sm_90, fp16 or
  bf16 (sm_80+), a bias and ReLU epilogue on some matmuls, against numpy in the simulator. 8 built per kind."""
  import dataclasses
  import zlib
  import minicomp.graph.tensor_core_schedules as T
  from minicomp import workloads as W
  from minicomp.ir.dag import ComputeDAG
  rng = np.random.default_rng(zlib.crc32(kind.encode()) + 1)
  built = 0
  while built < 8:
    arch = str(rng.choice(["sm_75", "sm_80", "sm_86", "sm_90"]))
    dt = "float16" if arch == "sm_75" else str(rng.choice(["float16", "bfloat16"]))
    chunks = int(rng.choice([2, 4, 8]))
    k = T.KSTEP * chunks * int(rng.integers(1, 3))
    m, n = int(rng.integers(9, 101)), int(rng.choice([8, 16, 24, 40, 64]))
    if kind == "matmul": wl = W.matmul(m, n, k, bias_relu=bool(rng.integers(2)), dtype=dt)
    elif kind == "batch_matmul": wl = W.batch_matmul(2, m, n, k, dtype=dt)
    else:
      hw, f = int(rng.integers(5, 17)), int(rng.choice([1, 3]))
      wl = W.conv2d(1, k, hw, hw, n, f, pad=f // 2, dtype=dt, channels_last_weights=True)
    dag = ComputeDAG(wl.outputs)
    p = T.plan(dag, mc.Target(arch))
    fits = [c for c in T.CONFIGS if p is not None and p.fits(*c)]
    if not fits: continue
    cfg = fits[int(rng.integers(len(fits)))]
    try:
      s = T._schedule(dag, dataclasses.replace(p, split=chunks), *cfg, mc.Target(arch))
    except (mc.ScheduleError, mc.LoweringError):   # (a lane box bound inference cannot size: no candidate)
      continue
    kern = mc.build(s, target=arch)
    assert len(kern.launches) == 2 and "mma.sync.aligned" in kern.binary.ptx
    ins = wl.random_inputs(seed=int(rng.integers(1 << 30)))
    ref = wl.reference(*[a.astype(np.float32) for a in ins]).astype(np.float64)
    out = kern(*ins, device="cpu").astype(np.float64)
    bits = 10 if dt == "float16" else 7
    assert np.abs(out - ref).max() <= 2.0 ** -(bits + 1) * np.abs(ref).max() + 1e-3, (kind, cfg, chunks, m, n, k, arch)
    built += 1


def test_a_split_reduction_on_tf32_matches_numpy(monkeypatch):
  """Split-K of float32 tasks on TF32 (``precision="tf32"``'s template: m16n8k8 on sm_80): a matmul with bias and
  ReLU and a convolution on 7 x 7 pixels, two kernels each, within TF32's rounding (2^-10 of the sum of |products|)
  of numpy's float64 result, and not float32's exact one."""
  import minicomp.graph.tensor_core_schedules as T
  from minicomp import workloads as W
  from minicomp.ir.dag import ComputeDAG
  monkeypatch.setattr(T, "SPLIT_BLOCKS_PER_SM", 0.4)
  monkeypatch.setattr(T, "SPLIT_MIN_K", 64)
  for wl in (W.matmul(48, 40, 256, bias_relu=True), W.conv2d(1, 128, 7, 7, 24, 3, pad=1, channels_last_weights=True)):
    (s,) = [s for s in T.tensor_core_schedules(ComputeDAG(wl.outputs), mc.Target("sm_80"), tf32=True)
            if any(st.name.endswith(".rf") for st in s.state.stages)]
    k = mc.build(s, target="sm_80")
    assert len(k.launches) == 2 and "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in k.binary.ptx
    ins = wl.random_inputs(seed=2)
    ref = wl.reference(*[a.astype(np.float64) for a in ins]).astype(np.float64)
    bound = wl.reference(*[np.abs(a).astype(np.float64) for a in ins]).astype(np.float64)
    out = k(*ins, device="cpu").astype(np.float64)
    assert (np.abs(out - ref) <= 2.0 ** -10 * np.abs(bound) + 1e-5).all() and np.abs(out - ref).max() > 1e-5
