#!/usr/bin/env bash
# The GPU checks of issues 46-48 in one call, for a lent GPU machine with its own python3 (PyTorch, onnxruntime,
# jax, cuda-bindings there): the gpu-marked tests, the measured benchmarks against PyTorch, and a timings
# collection for the static model's calibration. Each step has its own time limit and writes its result to
# $OUT as it comes, so a step that overruns costs only itself.
#
#   OUT=/tmp/out bash benchmarks/gpu_check.sh          # islpy from .whl/ when the machine lacks it
#
# Steps (seconds): smoke 60, half / tensor-core tests 170, the other gpu tests (dp4a too) 110, the hand-written
# tensor-core matmul variants 100, mma.sync's peak 40, tensor_cores.py --gpu 110, precision.py --gpu 100, the fp16
# encoder's kernels 60, ResNet-18's kernels with and without the tensor cores 90, minicomp collect (fp16 matmul and
# conv) until 520 s have passed. On
# an H200 (2026-11-29) the steps before the last took 235 s (the ResNet-18 one, run apart, 25 s) after a start of
# about 30 s.
set -u
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
START=$SECONDS
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "wheel install failed"; exit 3; }
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 MINICOMP_CACHE_DIR=/tmp/mccache
step() {  # step NAME LIMIT_S FILE COMMAND...: run with a time limit, output appended to $OUT/FILE and echoed
  local name=$1 limit=$2 file=$3; shift 3
  echo "=== $name (limit ${limit}s, at $((SECONDS - START))s)" | tee -a "$OUT/$file"
  timeout -k 5 "$limit" "$@" >>"$OUT/$file" 2>&1
  local rc=$?
  echo "=== $name: rc=$rc after $((SECONDS - START))s" | tee -a "$OUT/$file"
  return $rc
}

{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv
  python3 -c "import sys, numpy, jax, onnx, onnxruntime; print(sys.version.split()[0], numpy.__version__, jax.__version__, onnx.__version__, onnxruntime.__version__)"
  python3 -m pip show cuda-bindings torch 2>/dev/null | grep -E "^(Name|Version)"; } >"$OUT/env.txt" 2>&1
step smoke 60 env.txt python3 -c "
import minicomp as mc, numpy as np
from minicomp import workloads as W
print(mc.gpu_status())
wl = W.matmul(64, 64, 64, dtype='float16')
from minicomp.graph.tensor_core_schedules import tensor_core_schedules
from minicomp.ir.dag import ComputeDAG
s = tensor_core_schedules(ComputeDAG(wl.outputs), mc.Target('cuda'))[0]
ins = wl.random_inputs()
got = mc.build(s, target='cuda')(*ins, device='gpu').astype(np.float32)
want = wl.reference(*[a.astype(np.float32) for a in ins])
print('tensor-core smoke: max |gpu - numpy| =', float(np.abs(got - want).max()), 'of', float(np.abs(want).max()))
" || { cat "$OUT/env.txt"; exit 4; }

step "half and tensor-core gpu tests" 170 gputests.txt python3 -m pytest -m gpu -q -n 8 -p no:cacheprovider -rs \
  tests/test_on_gpu_precision.py tests/test_tensor_core.py tests/test_tensorize.py
step "other gpu tests" 110 gputests.txt python3 -m pytest -m gpu -q -n 8 -p no:cacheprovider -rs \
  tests/test_on_gpu.py tests/test_measure.py tests/test_nvrtc.py tests/test_dynamic_shared.py
step "tensor-core matmul variants" 100 variants.txt python3 research/tc_kernel_variants.py --gpu --size 4096
step "mma.sync peak" 40 variants.txt python3 research/mma_peak.py --gpu
step "tensor_cores.py --gpu" 110 tensor_cores.txt python3 benchmarks/tensor_cores.py --gpu
step "precision.py --gpu" 100 precision.txt python3 benchmarks/precision.py --gpu --precisions fp32 fp16 bf16 \
  --models residual_block inverted_residual transformer_encoder
step "the fp16 encoder's kernels" 60 encoder.txt python3 benchmarks/gpu_models.py --models transformer_encoder \
  --precision fp16
step "tensor cores or not, per kernel" 90 choice.txt python3 research/tc_choice_check.py --gpu --model resnet18
step "Gensor's tensor-core constructions or not" 90 choice.txt python3 research/tc_choice_check.py --gpu \
  --model resnet18 --gensor-tc
LEFT=$((520 - (SECONDS - START)))
if [ "$LEFT" -gt 20 ]; then
  step "collect (fp16 matmul, conv)" "$LEFT" collect.txt python3 -m minicomp.cli collect -o "$OUT/timings_half.jsonl" \
    --per-task 32 --workload 'matmul(1024, 1024, 1024, dtype="float16")' \
    --workload 'conv2d(1, 64, 56, 56, 64, 3, pad=1, dtype="float16", channels_last_weights=True)'
fi
tail -n 3 "$OUT/gputests.txt"; cat "$OUT/variants.txt" "$OUT/tensor_cores.txt" "$OUT/precision.txt" "$OUT/choice.txt" \
  | grep -v "^  \|^\[minicomp\]"
