"""The GPU path without a GPU: a fake driver (tests/fake_gpu.py) that runs kernels on the CPU
simulator and records every call. Checks what a model run sends over the bus and launches, the
arch / PTX choice, CUDA graphs, benchmarks, pickling and freeing."""
import gc
import logging
import pickle

import numpy as np
import pytest

import fake_gpu as fg
import minicomp as mc
from minicomp import workloads as W
from minicomp import zoo
from minicomp.codegen import driver as D
from minicomp.codegen import resident
from minicomp.codegen.gpu_runtime import GpuModule, choose_image
from minicomp.codegen.driver import DevicePtr, DeviceInfo, NoGPUError
from onnx_harness import run_ort


@pytest.fixture(scope="module")
def block():
  model, feeds = zoo.residual_block()
  return mc.compile(model, target="sm_86"), feeds, run_ort(model, feeds)


def _fresh(cm):
  """The same compiled model without any device state (a model keeps its sessions)."""
  return mc.compiled_model.CompiledModel(cm.target, cm.inputs, cm.output_names, cm.kernels, cm.steps, cm.weights,
                                         cm.consts, cm.name)


def test_model_is_device_resident(fake_gpu, block):
  cm0, feeds, want = block
  cm = _fresh(cm0)
  for _ in range(2):
    got = cm.run(feeds)                                   # device=None picks the (fake) GPU
    for g, w in zip(got, want): np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
  weight_bytes = sum(w.nbytes for w in cm.weights.values()) + sum(c.nbytes for c in cm.consts.values())
  input_bytes = sum(f.nbytes for f in feeds.values())
  ups = [c[2] for c in fake_gpu.of("htod")]
  assert sum(ups) == weight_bytes + 2 * input_bytes        # weights once, inputs on every run
  downs = [c[2] for c in fake_gpu.of("dtoh")]
  assert downs == [sum(w.nbytes for w in want)] * 2 or sum(downs) == 2 * sum(w.nbytes for w in want)
  assert fake_gpu.count("sync") == 1 + 2                   # one after the uploads, then one per run
  # launches in plan order, with the plan's grids and blocks, on the allocated buffers
  plan = [(l.kernel, l.grid, l.block) for c in cm.calls for l in cm.kernels[c.kernel].plan.launches]
  launched = [(c[1], c[2], c[3]) for c in fake_gpu.of("launch")]
  assert launched == plan * 2
  allocs = {c[1] for c in fake_gpu.of("alloc")}
  assert all(p in allocs for c in fake_gpu.of("launch") for p in c[4])
  assert fake_gpu.count("module_load") == len(cm.kernels)  # each kernel loaded once
  # no allocation after the first run
  first_run_end = [i for i, c in enumerate(fake_gpu.calls) if c[0] == "sync"][1]
  assert not any(c[0] == "alloc" for c in fake_gpu.calls[first_run_end:])


def test_pool_lives_on_the_device(fake_gpu, block):
  cm = _fresh(block[0])
  cm.run(block[1])
  sizes = sorted(c[2] for c in fake_gpu.of("alloc"))
  for slot in cm._slot_bytes: assert slot in sizes
  s = cm.session()
  assert s.uploaded_bytes == sum(w.nbytes for w in cm.weights.values()) + sum(c.nbytes for c in cm.consts.values())


def test_cuda_graph_is_captured_once_and_replayed(fake_gpu, block):
  cm0, feeds, want = block
  cm = _fresh(cm0)
  for _ in range(3):
    got = cm.run(feeds, cuda_graph=True)
    for g, w in zip(got, want): np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
  n = sum(len(cm.kernels[c.kernel].plan.launches) for c in cm.calls)
  assert fake_gpu.count("capture_begin") == 1 and fake_gpu.of("capture_end") == [("capture_end", n)]
  assert fake_gpu.count("graph_launch") == 3 and fake_gpu.count("launch") == 3 * n


def test_dropping_the_model_frees_its_gpu_memory(fake_gpu, block):
  cm = _fresh(block[0])
  cm.run(block[1], cuda_graph=True)
  assert fake_gpu.live_bytes > 0
  del cm
  gc.collect()
  assert fake_gpu.live_bytes == 0 and fake_gpu.count("graph_destroy") == 1
  cm = _fresh(block[0])
  cm.run(block[1])
  cm.release_device()
  assert fake_gpu.live_bytes == 0
  cm.run(block[1])                                       # uploads again
  assert fake_gpu.live_bytes > 0


def test_every_zoo_model_matches_onnxruntime_through_the_gpu_path(fake_gpu):
  for name in ("inverted_residual", "transformer_encoder", "generator"):
    model, feeds = zoo.TEST_MODELS[name]()
    cm = mc.compile(model, target="sm_86")
    for g, w in zip(cm.run(feeds, device="gpu"), run_ort(model, feeds)):
      np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=name)


def test_benchmark_table(fake_gpu, block):
  cm = _fresh(block[0])
  r = cm.benchmark(block[1], repeat=3, warmup=1)
  assert len(r.calls) == len(cm.calls) and r.repeat == 3 and not r.is_estimate
  n = sum(len(cm.kernels[c.kernel].plan.launches) for c in cm.calls)
  assert r.median_s == pytest.approx(n * fake_gpu.launch_s)       # the fake clock: 10 us per launch
  assert sum(c[2] for c in r.calls) == pytest.approx(r.median_s)
  # L2 flushed before each timed run: 3 end to end, 3 per call and one per-call run tried again with a longer delay
  # (the fake's clock does not see the delay kernel's cycles, so it tries once and says so)
  assert fake_gpu.count("memset") == 3 + 3 + 1
  text = str(r)
  assert "MEASURED" in text and "Fake GPU" in text and "end to end" in text
  assert r.host_waits == 3 and "in 3 of 3 runs the GPU may have waited for the host" in text
  assert cm.benchmark(repeat=1, warmup=0, flush_l2=False).repeat == 1   # random feeds


def test_per_call_times_start_after_the_host_has_queued_every_launch(fake_gpu, block, monkeypatch):
  # A GPU's clock runs while the delay kernel spins: here 1 ns a cycle. The session holds the GPU back until the
  # host has queued every launch of a run (so no event pair times a launch call), lengthening the delay until the
  # host's queueing fits in it.
  run = fake_gpu._run

  def clocked(fn, grid, block, shared_bytes, args):
    run(fn, grid, block, shared_bytes, args)
    if fn[1] == "mc_delay": fake_gpu._clock += int(args[0]) * 1e-9
  monkeypatch.setattr(fake_gpu, "_run", clocked)
  cm = _fresh(block[0])
  r = cm.benchmark(block[1], repeat=3, warmup=1)
  assert r.host_waits == 0 and "may have waited" not in str(r)
  assert sum(c[2] for c in r.calls) == pytest.approx(r.median_s)      # the kernels' own times, as before
  names = [c[1] for c in fake_gpu.of("launch")]
  delays = [c for c in fake_gpu.of("launch") if c[1] == "mc_delay"]
  n = sum(len(cm.kernels[c.kernel].plan.launches) for c in cm.calls)
  assert len(delays) >= 3 and all(names[i + 1] != "mc_delay" for i, x in enumerate(names[:-1]) if x == "mc_delay")
  cycles = [int(c[4][0]) for c in delays]
  assert cycles == sorted(cycles) and cycles[0] == resident.DELAY_START_CYCLES
  assert names[-n - 1] == "mc_delay"            # the last run: the delay, then every launch of the model


def test_benchmark_without_gpu_points_to_the_estimate(monkeypatch, block):
  monkeypatch.setitem(D._failures, "cuda", "no usable GPU through the 'cuda' backend: no libcuda")
  monkeypatch.delitem(D._drivers, "cuda", raising=False)
  monkeypatch.setenv(D.ENV_BACKEND, "cuda")
  with pytest.raises(NoGPUError, match=r"no libcuda.*estimate\(\)"):
    block[0].benchmark(block[1])
  with pytest.raises(mc.RuntimeLaunchError, match="needs a GPU"):
    block[0].run(block[1], device="cpu", cuda_graph=True)


def _mm_kernel(arch="sm_86"):
  import test_workloads as T
  wl = W.matmul(64, 48, 32)
  return T.mm_tiled_shared(wl, tile=16, thread=2, kt=8), wl


def test_kernel_on_the_gpu_and_pickled(fake_gpu):
  s, wl = _mm_kernel()
  kern = mc.build(s, "sm_86")
  a, b = (np.random.default_rng(0).standard_normal(t.shape).astype(np.float32) for t in wl.inputs)
  on_gpu = kern(a, b, device="gpu")
  np.testing.assert_allclose(on_gpu, a @ b, rtol=1e-4, atol=1e-4)
  kern.run([a, b], device="cpu")                          # a live simulator handle ...
  k2 = pickle.loads(pickle.dumps(kern))                   # ... and GPU module are left out
  assert k2.source == kern.source and k2.plan == kern.plan and k2.binary == kern.binary
  assert np.array_equal(k2(a, b, device="cpu"), kern(a, b, device="cpu"))
  assert np.array_equal(k2(a, b, device="gpu"), on_gpu)


def test_arch_choice():
  gpu = lambda cc: DeviceInfo("g", cc, 12080, 0, "fake")
  assert choose_image("sm_86", gpu((8, 6))) == "cubin"
  assert choose_image("sm_86", gpu((8, 9))) == "cubin"      # same major, newer minor: the cubin runs
  assert choose_image("sm_86", gpu((9, 0))) == "ptx"        # newer major: JIT the PTX
  assert choose_image("sm_90", gpu((10, 0))) == "ptx"
  assert choose_image("sm_100", gpu((10, 0))) == "cubin"
  with pytest.raises(mc.RuntimeLaunchError, match="target='cuda'"):
    choose_image("sm_90", gpu((8, 6)))


def test_mismatched_cubin_loads_ptx_with_one_warning(monkeypatch, caplog):
  fake = fg.install(monkeypatch, cc=(9, 0), gpu_name="Fake H100")
  s, wl = _mm_kernel()
  a, b = (np.random.default_rng(1).standard_normal(t.shape).astype(np.float32) for t in wl.inputs)
  monkeypatch.setattr("minicomp.codegen.gpu_runtime._warned", set())
  with caplog.at_level(logging.WARNING, logger="minicomp"):
    for _ in range(2):
      np.testing.assert_allclose(mc.build(s, "sm_86")(a, b), a @ b, rtol=1e-4, atol=1e-4)
    GpuModule(mc.build(s, "sm_86").binary)
  assert [c[1] for c in fake.of("module_load")] == ["ptx"] * 3
  assert sum("PTX JIT" in r.message for r in caplog.records) == 1
  fake2 = fg.install(monkeypatch, cc=(8, 6))
  mc.build(s, "sm_86")(a, b)
  assert [c[1] for c in fake2.of("module_load")] == ["cubin"]


def test_gpu_older_than_the_build_is_refused(monkeypatch):
  fg.install(monkeypatch, cc=(8, 0))
  s, wl = _mm_kernel()
  kern = mc.build(s, "sm_86")
  with pytest.raises(mc.RuntimeLaunchError, match=r"built for sm_86, newer than the GPU.*target='cuda'"):
    kern(*(np.zeros(t.shape, np.float32) for t in wl.inputs), device="gpu")


def test_ptx_newer_than_the_driver_is_refused(monkeypatch):
  s, wl = _mm_kernel()
  kern = mc.build(s, "sm_86")
  fg.install(monkeypatch, cc=(9, 0), driver_version=12020)     # CUDA 12.2 driver: PTX ISA up to 8.2
  with pytest.raises(mc.RuntimeLaunchError, match=r"PTX is ISA 8\.\d+, newer than the driver.*CUDA 12\.2"):
    GpuModule(kern.binary)
  fg.install(monkeypatch, cc=(9, 0), driver_version=99000, max_ptx=(8, 0))   # unknown driver: ask it
  with pytest.raises(mc.RuntimeLaunchError, match="UNSUPPORTED_PTX_VERSION"):
    GpuModule(kern.binary)


def test_numpy_level_launch(fake_gpu):
  src = ('extern "C" __global__ void add(const float* __restrict__ x, const float* __restrict__ y, float* z, int n) {\n'
         '  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) z[i] = x[i] + y[i]; }\n')
  mod = GpuModule(mc.codegen.nvrtc.compile_cuda(src, "sm_86"))
  x, y, z = np.arange(8, dtype=np.float32), np.ones(8, np.float32), np.zeros(8, np.float32)
  t = mod.launch("add", grid=1, block=(8,), shared_bytes=0, args=[x, y, z, 8], time=True)
  assert t == pytest.approx(fake_gpu.launch_s) and np.array_equal(z, x + 1)
  assert fake_gpu.live_bytes == 0                                 # per-call buffers freed
  p = fake_gpu.alloc(32)
  mod.launch("add", 1, 8, 0, [x, y, DevicePtr(p), 8])             # a device pointer passes through
  np.testing.assert_array_equal(fake_gpu.mem[p].view(np.float32), x + 1)
  with pytest.raises(mc.RuntimeLaunchError, match=r"add<<<.*takes 4 arguments"):
    mod.launch("add", 1, 8, 0, [x, y, z])
  with pytest.raises(mc.RuntimeLaunchError, match=r"kernel 'nope' is not in the module"):
    mod.launch("nope", 1, 8, 0, [x])


def test_launch_failure_names_the_kernel_call(fake_gpu, block):
  cm = _fresh(block[0])
  name = cm.kernels[cm.calls[0].kernel].plan.launches[0].kernel
  fake_gpu.fail_launch[name] = "CUDA_ERROR_ILLEGAL_ADDRESS"
  with pytest.raises(D.DriverError, match=rf"call 0 \(.*\): {name}<<<.*CUDA_ERROR_ILLEGAL_ADDRESS") as e:
    cm.run(block[1])
  assert e.value.sticky


def test_backend_choice(monkeypatch):
  monkeypatch.setenv(D.ENV_BACKEND, "opencl")
  with pytest.raises(mc.RuntimeLaunchError, match="MINICOMP_GPU_BACKEND='opencl'"):
    D.default_backend()
  monkeypatch.setenv(D.ENV_BACKEND, "pycuda")
  assert D.default_backend() == "pycuda"
  with pytest.raises(mc.RuntimeLaunchError, match="device must be"):
    D.backend_for("tpu")
  assert D.backend_for("cpu") is None


def test_no_gpu_here_is_reported_not_raised():
  """This machine has no GPU driver: probing answers False with the reason and never raises."""
  if D.gpu_available("cuda"):
    pytest.skip(f"a GPU is present here: {D.gpu_status('cuda')}")
  assert "no usable GPU through the 'cuda' backend" in D.gpu_status("cuda")
  assert D.gpu_arch("cuda") is None
  with pytest.raises(NoGPUError):
    D.get_driver("cuda")


def test_cli_bench(fake_gpu, block, tmp_path, capsys):
  from minicomp.cli import main
  folder = block[0].save(tmp_path / "m")
  assert main(["bench", str(folder), "--repeat", "2", "--warmup", "0"]) == 0
  out = capsys.readouterr().out
  assert "MEASURED" in out and "end to end" in out and "Fake GPU" in out


def test_cli_bench_without_gpu_prints_the_estimate(monkeypatch, block, tmp_path, capsys):
  from minicomp.cli import main
  monkeypatch.setitem(D._failures, "cuda", "no usable GPU through the 'cuda' backend: no libcuda")
  monkeypatch.delitem(D._drivers, "cuda", raising=False)
  monkeypatch.setenv(D.ENV_BACKEND, "cuda")
  import onnx
  model, _ = zoo.residual_block()
  onnx.save(model, tmp_path / "m.onnx")
  assert main(["bench", str(tmp_path / "m.onnx")]) == 0                  # --target auto: sm_86 without a GPU
  cap = capsys.readouterr()
  assert "no GPU to measure on" in cap.err and "no libcuda" in cap.err
  assert "estimated latency on rtx3090 (static model, no GPU measurement)" in cap.out


def test_cli_bench_of_a_saved_model_without_gpu_prints_its_estimate(monkeypatch, tmp_path, capsys):
  """A saved model keeps the static model's analyses: `minicomp bench out/` prints the estimate the
  compiled model gave, with one header, and says once why it did not measure."""
  from minicomp.cli import main
  monkeypatch.setitem(D._failures, "cuda", "no usable GPU through the 'cuda' backend: no libcuda.")
  monkeypatch.delitem(D._drivers, "cuda", raising=False)
  monkeypatch.setenv(D.ENV_BACKEND, "cuda")
  model, _ = zoo.residual_block()
  cm = mc.compile(model, "sm_86")
  cm.save(tmp_path / "out")
  assert main(["bench", str(tmp_path / "out")]) == 0
  cap = capsys.readouterr()
  assert cap.err.count("no GPU to measure on (no usable GPU through the 'cuda' backend: no libcuda)") == 1
  assert ".." not in cap.err and "mod.estimate()" not in cap.err
  assert cap.out.count("static model, no GPU measurement") == 1
  assert f"{cm.estimate().latency_s * 1e6:.1f} us over {len(cm.calls)} kernel calls" in cap.out


def test_target_cuda_follows_the_gpu(monkeypatch, caplog):
  fake = fg.install(monkeypatch, cc=(9, 0), gpu_name="NVIDIA H100 80GB HBM3")
  t = mc.Target("cuda")
  assert (t.arch, t.device_name, t.device.name) == ("sm_90", "h100", "h100")
  assert mc.Target("auto") == t
  s, wl = _mm_kernel()
  kern = mc.build(s, "cuda")
  a, b = (np.random.default_rng(2).standard_normal(x.shape).astype(np.float32) for x in wl.inputs)
  np.testing.assert_allclose(kern(a, b), a @ b, rtol=1e-4, atol=1e-4)
  assert [c[1] for c in fake.of("module_load")] == ["cubin"]           # native code, no JIT
  fg.install(monkeypatch, cc=(9, 9), gpu_name="Some future GPU")
  with caplog.at_level(logging.WARNING, logger="minicomp"):
    t = mc.Target("cuda")
  assert t.arch == "sm_90" and t.device_name is None and "no target for" in caplog.text


def test_target_cuda_without_gpu_says_how_to_fix(monkeypatch):
  monkeypatch.setitem(D._failures, "cuda", "no usable GPU through the 'cuda' backend: no libcuda")
  monkeypatch.delitem(D._drivers, "cuda", raising=False)
  monkeypatch.setenv(D.ENV_BACKEND, "cuda")
  with pytest.raises(mc.target.TargetError, match=r"no libcuda.*target='sm_86'"):
    mc.Target("cuda")
  assert mc.Target("auto").arch == "sm_86"
