"""Dynamic shared memory: a kernel whose shared tiles pass the 48 KiB static __shared__ arrays may hold declares one
``extern __shared__`` array, each tile a pointer into it, and every launch path passes its size and allows it
(cuFuncSetAttribute). Checked against numpy in the CPU simulator, through NVRTC for sm_80 / 86 / 90, on the fake
GPU (which refuses, as the driver does, a launch past 48 KiB that was not allowed, and one passing fewer bytes than
the kernel declares), through save / load, and in the static model; the searches keep offering 48 KiB."""
import dataclasses
import re

import numpy as np
import pytest
from onnx import helper

import minicomp as mc
from minicomp import workloads as W
from minicomp.codegen.cuda import dynamic_shared_bytes, shared_layout
from minicomp.codegen.kernel import LaunchPlan
from minicomp.codegen.simulator import SHIM_PATH
from minicomp.errors import ScheduleError
from minicomp.search.annotate import validate
from minicomp.search.static.estimate import launch_facts
from minicomp.target import MAX_SHARED_OPTIN_BYTES, STATIC_SHARED_BYTES, Target, as_target
from onnx_harness import make_model


def _two_tiles(dag_outputs, rows: int, pad_a: int = 0) -> mc.Schedule:
  """C = A @ B, a block of ``rows`` rows with its A rows and the whole B in shared memory (``pad_a`` extra floats
  per A row through storage_align: a tile whose size is no multiple of 16 bytes puts B's offset on alignment)."""
  s = mc.Schedule(dag_outputs)
  i, j = s.axis("C")
  io, ii = s.split("C", i, rows)
  s.bind("C", io, "blockIdx.x")
  s.bind("C", j, "threadIdx.x")
  AS = s.cache_read("A", "shared", ["C"])
  BS = s.cache_read("B", "shared", ["C"])
  s.compute_at(AS, "C", io)
  s.compute_at(BS, "C", io)
  if pad_a: s.storage_align(AS, 0, 128, pad_a)      # rows of 128 + pad_a floats
  return s


def test_a_kernel_past_48_kib_takes_dynamic_shared_memory_and_computes_the_right_thing():
  wl = W.matmul(256, 64, 128)            # A tile 128 x (128 + 1) floats, B 128 x 64: 66,048 + 32,768 bytes
  s = _two_tiles(wl.outputs, 128, pad_a=1)
  k = mc.build(s, "sm_86")
  (kir,) = k.program.kernels
  offsets, total = shared_layout(kir)
  assert total > STATIC_SHARED_BYTES and dynamic_shared_bytes(kir) == total == k.plan.launches[0].shared_bytes
  assert sorted(offsets.values())[1] % 16 == 0 and sorted(offsets.values())[1] >= 128 * 129 * 4   # no overlap
  assert f"extern __shared__ __align__(16) unsigned char mc_dynamic_shared[];  // {total} bytes" in k.source
  for name, off in offsets.items():
    assert f"float* const {name} = reinterpret_cast<float*>(mc_dynamic_shared + {off});" in k.source
  assert "__shared__ __align__(16) float" not in k.source
  a, b = wl.random_inputs()
  np.testing.assert_allclose(k(a, b), a @ b, rtol=1e-5, atol=1e-4)     # the CPU simulator runs the same text
  assert ".extern .shared .align 16 .b8 mc_dynamic_shared[];" in k.ptx and "ld.shared" in k.ptx
  assert k.resources.shared_bytes == 0                                  # (ptxas counts static shared memory only)


def test_a_kernel_within_48_kib_keeps_its_static_arrays():
  wl = W.matmul(256, 64, 32)
  k = mc.build(_two_tiles(wl.outputs, 64), "sm_86")                     # 8 KiB + 8 KiB
  assert k.plan.launches[0].shared_bytes == 0 and "extern __shared__" not in k.source
  assert re.search(r"__shared__ __align__\(16\) float A_shared\[\d+\];", k.source)


@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_86", "sm_90"])
def test_the_arch_limit_is_its_opt_in_maximum(arch):
  wl = W.matmul(256, 64, 160)            # A tile 128 x 160 floats + B 160 x 64: 122,880 bytes
  s = _two_tiles(wl.outputs, 128)
  limit = Target(arch).max_shared_optin_bytes
  assert (122880 <= limit) == (arch in ("sm_80", "sm_90"))
  if 122880 <= limit:
    k = mc.build(s, arch)
    assert k.plan.launches[0].shared_bytes == 122880 and "ld.shared" in k.ptx
  else:
    with pytest.raises(ScheduleError, match=rf"122880 bytes of shared memory .*{arch} allows {limit} per block"):
      mc.build(s, arch)


def test_the_searches_offer_48_kib_and_a_target_may_allow_less():
  wl = W.matmul(256, 64, 128)
  s = _two_tiles(wl.outputs, 128)
  tgt = as_target("sm_86")
  assert validate(s, tgt)[1] is None                                     # it builds ...
  _, why = validate(s, tgt, tgt.search_shared_bytes)                     # ... but no search proposes it
  assert why is not None and "the search offers 49152 per block" in why
  small = dataclasses.replace(tgt, max_shared_bytes_per_block=16 * 1024)
  with pytest.raises(ScheduleError, match="sm_86 allows 16384 per block"):
    mc.build(s, small)


def test_the_static_model_counts_the_dynamic_bytes_in_occupancy():
  wl = W.matmul(256, 64, 128)
  k = mc.build(_two_tiles(wl.outputs, 128), "sm_86")                     # 96 KiB a block: one block per SM
  (f,) = launch_facts(k, as_target("sm_86").device)
  assert f.blocks_per_sm == 1


def test_the_plan_keeps_the_bytes_and_writes_them_only_where_there_are_some():
  wl = W.matmul(256, 64, 128)
  k = mc.build(_two_tiles(wl.outputs, 128), "sm_86")
  d = k.plan.to_dict()
  assert d["launches"][0]["shared_bytes"] == k.plan.launches[0].shared_bytes > 0
  assert LaunchPlan.from_dict(d) == k.plan
  small = mc.build(_two_tiles(W.matmul(256, 64, 32).outputs, 64), "sm_86").plan.to_dict()
  assert "shared_bytes" not in small["launches"][0]                      # (saved models as before)
  assert LaunchPlan.from_dict(small).launches[0].shared_bytes == 0


def test_the_simulator_array_is_the_largest_any_arch_allows():
  assert f"#define MC_DYNAMIC_SHARED_BYTES ({MAX_SHARED_OPTIN_BYTES // 1024} * 1024)" in SHIM_PATH.read_text()


# -- launches on the fake GPU, a compiled model, save and load

def test_kernel_launches_allow_the_bytes_on_the_gpu(fake_gpu):
  wl = W.matmul(256, 64, 128)
  k = mc.build(_two_tiles(wl.outputs, 128), "sm_86")
  a, b = wl.random_inputs()
  np.testing.assert_allclose(k.run([a, b], device="gpu")[0], a @ b, rtol=1e-5, atol=1e-4)
  n = k.plan.launches[0].shared_bytes
  assert fake_gpu.of("allow_shared") == [("allow_shared", k.plan.launches[0].kernel, n)]
  k.run([a, b], device="gpu")
  assert fake_gpu.count("allow_shared") == 1                             # once per loaded kernel
  mod = k.gpu_module()
  out = np.zeros((256, 64), np.float32)
  with pytest.raises(mc.errors.DriverError, match="needs .* bytes of dynamic shared memory, launched with 1024"):
    mod.launch(k.plan.launches[0].kernel, k.plan.launches[0].grid, k.plan.launches[0].block, 1024, [a, b, out])


def test_the_fake_driver_refuses_what_the_driver_refuses(fake_gpu):
  wl = W.matmul(256, 64, 128)
  k = mc.build(_two_tiles(wl.outputs, 128), "sm_86")
  l = k.plan.launches[0]
  mod = k.gpu_module()
  fn = mod.driver.function(mod._module, l.kernel)                       # not allowed: as cuLaunchKernel, refused
  with pytest.raises(mc.errors.DriverError, match="not allowed"):
    fake_gpu.launch(fn, l.grid, l.block, l.shared_bytes, [0, 0, 0])


def _model_with_big_tiles():
  """A MatMul model compiled for sm_86, its kernel replaced by the two-tile schedule of its own task (96 KiB)."""
  rng = np.random.default_rng(0)
  w = rng.standard_normal((128, 64)).astype(np.float32)
  x = rng.standard_normal((256, 128)).astype(np.float32)
  model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": x}, ["y"], {"w": w})
  cm = mc.compile(model, target="sm_86")
  (task,) = cm.tasks
  (out,) = task.dag.outputs
  s = mc.Schedule(task.dag.outputs)
  i, j = s.axis(out.name)
  io, _ = s.split(out.name, i, 128)
  s.bind(out.name, io, "blockIdx.x")
  s.bind(out.name, j, "threadIdx.x")
  for n in [t.name for t in task.dag.placeholders]:
    tile = s.cache_read(n, "shared", [out.name])
    s.compute_at(tile, out.name, io)
  big = mc.build(s, "sm_86")
  assert big.plan.inputs == cm.kernels[0].plan.inputs and big.plan.outputs == cm.kernels[0].plan.outputs
  assert big.plan.launches[0].shared_bytes == 128 * 128 * 4 + 128 * 64 * 4
  cm.kernels[0] = big
  return cm, {"x": x}, x @ w


def test_a_compiled_model_runs_saves_and_loads_with_dynamic_shared_memory(fake_gpu, tmp_path):
  cm, feeds, want = _model_with_big_tiles()
  np.testing.assert_allclose(cm.run(feeds, device="cpu")[0], want, rtol=1e-5, atol=1e-4)
  np.testing.assert_allclose(cm.run(feeds)[0], want, rtol=1e-5, atol=1e-4)    # the resident session, fake GPU
  assert fake_gpu.count("allow_shared") == 1
  cm.benchmark(feeds, repeat=2, warmup=1, cuda_graph=True)                     # captured launches too
  loaded = mc.load(cm.save(tmp_path / "m"))
  assert loaded.kernels[0].plan.launches[0].shared_bytes == cm.kernels[0].plan.launches[0].shared_bytes
  np.testing.assert_allclose(loaded.run(feeds, device="cpu")[0], want, rtol=1e-5, atol=1e-4)
  np.testing.assert_allclose(loaded.run(feeds)[0], want, rtol=1e-5, atol=1e-4)
  assert loaded.estimate().latency_s == pytest.approx(cm.estimate().latency_s)


def test_a_saved_launch_with_too_much_shared_memory_is_refused(tmp_path):
  import json
  cm, _, _ = _model_with_big_tiles()
  d = cm.save(tmp_path / "m")
  m = json.loads((d / "manifest.json").read_text())
  m["kernels"][0]["plan"]["launches"][0]["shared_bytes"] = MAX_SHARED_OPTIN_BYTES + 1
  from minicomp.saved_model import manifest_digest
  m["digest"] = manifest_digest(m)
  (d / "manifest.json").write_text(json.dumps(m))
  with pytest.raises(mc.errors.SaveFormatError, match=r"launches\[0\]\.shared_bytes"):
    mc.load(d)


@pytest.mark.gpu
def test_dynamic_shared_memory_on_the_gpu(needs_gpu):
  """On a real GPU: a 96 KiB block (allowed by cuFuncSetAttribute) computes the right thing."""
  from minicomp.codegen.driver import gpu_arch
  arch = gpu_arch()
  wl = W.matmul(256, 64, 128)
  k = mc.build(_two_tiles(wl.outputs, 128), arch)
  a, b = wl.random_inputs()
  np.testing.assert_allclose(k.run([a, b], device="gpu")[0], a @ b, rtol=1e-5, atol=1e-4)
