#!/usr/bin/env bash
# The GPU checks of the open issues (47, 48; 45 and 49 resolved) for a lent GPU machine with its own python3 (PyTorch,
# onnxruntime, jax, cuda-bindings there). Each step has its own time limit and writes its result to $OUT as it comes,
# so a step that overruns costs only itself.
#
#   OUT=/tmp/out PART=one bash benchmarks/gpu_check.sh  # one call (limits add to ~15 min; a 10-min call cuts the last,
#                                                       # so its steps run in the issues' order)
#   OUT=/tmp/out PART=a bash benchmarks/gpu_check.sh    # measurements (~8 minutes on an H200)
#   OUT=/tmp/out PART=b bash benchmarks/gpu_check.sh    # the gpu-marked tests, then timings for calibration
#
# Part a (seconds): smoke 60; whole models at trials=0 against PyTorch, fp32 without TF32, and the int8 ResNet-18
# and the LSTM against onnxruntime (benchmarks/gpu_models.py; issues 45, 48, 49) 250; compile's trials=0 picks of
# the strategies' eight tasks beside each task's fastest program of 2026-11-27 and PyTorch (issue 48) 100 + 40;
# Gensor's tensor-core constructions or not, per kernel of an fp16 ResNet-18 (issue 47) 90, then int8 tensor cores
# or dp4a, every kernel call of an int8 BERT-tiny (issues 47, 49) 90.
# Part b: every gpu-marked test 220, then `minicomp collect` on three fp32 tasks outside the eight until
# ${B_SECONDS:-300} s have passed. Part one: the gpu-marked tests first (correctness before speed, 120), BERT-base's
# layer and the fp16 matmul 4096^3 against PyTorch, then the layer per call with and without tensor cores, then the
# template's matmul in larger tiles (issue 47; 90 + 60 + 45), then `minicomp collect` of tensor-core programs (75), the
# whole models (150), then part a's other steps with less time (70 + 30, 60 + 60), then 30 conv programs with their
# fetch loops as they are and staged through registers (40 + 40), then ResNet-18 with and without split-K sketches
# (60), then `minicomp collect --model` of a ResNet-18's two heaviest layers (60): sixteen files.
# islpy comes from .whl/ when the machine lacks it.
set -u
OUT=${OUT:-/tmp/gpu_check}
PART=${PART:-a}
mkdir -p "$OUT"
START=$SECONDS
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "wheel install failed"; exit 3; }
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 MINICOMP_CACHE_DIR=/tmp/mccache_$PART
step() {  # step NAME LIMIT_S FILE COMMAND...: run with a time limit, output appended to $OUT/FILE and echoed
  local name=$1 limit=$2 file=$3; shift 3
  echo "=== $name (limit ${limit}s, at $((SECONDS - START))s)" | tee -a "$OUT/$file"
  timeout -k 5 "$limit" "$@" >>"$OUT/$file" 2>&1
  local rc=$?
  echo "=== $name: rc=$rc after $((SECONDS - START))s" | tee -a "$OUT/$file"
  return $rc
}

env_txt() {
  { nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv
    python3 -c "import sys, numpy, jax, onnx, onnxruntime as o; print(sys.version.split()[0], numpy.__version__, \
jax.__version__, onnx.__version__, o.__version__, o.get_available_providers())"
    python3 -m pip show cuda-bindings torch 2>/dev/null | grep -E "^(Name|Version)"; } >"$OUT/env.txt" 2>&1
}
gpu_tests() {  # LIMIT
  # (the notebooks module imports nbformat, which GPU machines lack; it has no gpu-marked tests)
  step "gpu-marked tests" "$1" gputests.txt python3 -m pytest -m gpu -q -n 16 -p no:cacheprovider -rs tests/ \
    --ignore=tests/test_notebooks.py
  tail -n 5 "$OUT/gputests.txt"
}
models() {  # LIMIT
  step "whole models against PyTorch and onnxruntime" "$1" models.txt python3 benchmarks/gpu_models.py --per-call
}
measurements() {  # PICKS_S PYTORCH_S CHOICE_S
  local sel=benchmarks/results/strategies/gpu/picks_2026-12-02/gpu_selection.jsonl.gz
  step "compile's picks of the eight tasks" "$1" picks.txt python3 benchmarks/strategies_gpu.py measure \
    --selection "$sel" --out "$OUT/picks" --deadline-s $(($1 - 20))
  step "the eight tasks through PyTorch" "$2" picks.txt python3 benchmarks/strategies_gpu.py pytorch --out "$OUT/picks"
  step "Gensor's tensor-core constructions or not" "$3" choice.txt python3 research/tc_choice_check.py --gpu \
    --model resnet18 --gensor-tc
  # (int8 tensor cores ran slower on an H200, 2026-11-30: every kernel call of both builds, to see where)
  step "int8 tensor cores or dp4a, every call" "$3" choice.txt python3 research/tc_choice_check.py --gpu \
    --model bert_tiny --precision int8-qdq --all-calls
  grep -v "^  \|^\[minicomp\]" "$OUT/models.txt" "$OUT/choice.txt" | tail -n 60
}

staged_ab() {  # LIMIT: conv programs timed on 2026-11-30, their fetch loops as they are and staged (issue 48)
  local sel=benchmarks/results/strategies/gpu/staging_2026-12-01/gpu_selection.jsonl.gz
  step "fetch loops as they are" "$1" staging.txt env MINICOMP_STAGED_FETCH=0 python3 benchmarks/strategies_gpu.py \
    measure --selection "$sel" --out "$OUT/staging_off" --deadline-s $(($1 - 15))
  step "fetch loops staged through registers" "$1" staging.txt env MINICOMP_STAGED_FETCH=1 python3 \
    benchmarks/strategies_gpu.py measure --selection "$sel" --out "$OUT/staging_on" --deadline-s $(($1 - 15))
}

env_txt
case "$PART" in
  a)
    step smoke 60 env.txt python3 -c "
import minicomp as mc, numpy as np
from minicomp import workloads as W
print(mc.gpu_status())
wl = W.matmul(64, 64, 64)
ins = wl.random_inputs()
got = mc.build(mc.Schedule(wl.outputs), target='cuda')(*ins, device='gpu')
print('smoke: max |gpu - numpy| =', float(np.abs(got - wl.reference(*ins)).max()))
" || { cat "$OUT/env.txt"; exit 4; }
    models 250
    measurements 100 40 90 ;;
  one)
    gpu_tests 120
    # (issue 47, 2026-12-02: BERT-base's FFN with GELU on the tensor cores and float4 fetches of its float32 inputs,
    # estimated 152.4 -> 95.5 us*; the layer and the matmul against PyTorch, then every call with and without them)
    step "tensor cores against PyTorch" 90 tensor_cores.txt python3 benchmarks/tensor_cores.py --gpu --dtypes float16 \
      --only bert matmul_4096
    step "BERT-base's layer per call" 60 tensor_cores.txt python3 research/tc_choice_check.py --gpu \
      --model bert_base_layer --all-calls
    # (2026-12-02: a ViT's 197 tokens, which no tile divides, on the tensor cores: 1327.2 -> 112.2 us* estimated)
    step "a ViT-B layer against PyTorch" 60 tensor_cores.txt python3 benchmarks/tensor_cores.py --gpu --dtypes float16 \
      --only vit
    # (2026-12-02: ResNet's 3 x 3 convolutions on 14 x 14 and 7 x 7 in 2-D tiles overhanging the image, split-K:
    # estimated 15.4 and 19.0 us*; the FP32 pipes 16.7 and 39.5)
    step "ResNet's late convolutions against cuDNN" 45 tensor_cores.txt python3 benchmarks/tensor_cores.py --gpu \
      --dtypes float16 --only conv3x3_14x14x256 conv3x3_7x7x512
    # (the fp16 matmul 4096^3 at 498 us reads 2.15 GB from L2 in 128 x 128 tiles, 4.3 TB/s: is L2 what bounds it?
    # 256 x 128 and 128 x 256 tiles of 8 warps read 1.61 GB; 2026-12-02, research/README.md)
    step "the template's larger tiles" 45 tensor_cores.txt python3 research/tc_kernel_variants.py --gpu --size 4096 \
      --templates-only --repeat 10
    tail -n 20 "$OUT/tensor_cores.txt"
    # (issues 47, 48: the static model has no tensor-core timings to be calibrated on; the template's family and
    # the sketch's draws on BERT-base's FFN matmuls, a square matmul and the conv, as `minicomp calibrate` reads them)
    step "collect tensor-core programs" 75 collect_tc.txt python3 -m minicomp.cli collect -o "$OUT/timings_tc.jsonl" \
      --per-task 16 --workload 'matmul(128, 3072, 768, dtype="float16")' \
      --workload 'matmul(128, 768, 3072, dtype="float16")' --workload 'matmul(1024, 1024, 1024, dtype="float16")' \
      --workload 'conv2d(1, 64, 56, 56, 64, 3, pad=1, dtype="float16", channels_last_weights=True)'
    tail -n 3 "$OUT/collect_tc.txt"
    models 150
    measurements 70 30 60
    staged_ab 40
    # (split-K sketches, not compile's default until a GPU times them: ResNet-18 at 64 x 64 with and without)
    step "split-K or not, per call" 60 split.txt python3 research/split_check.py --gpu --model resnet18
    tail -n 12 "$OUT/split.txt"
    # (issue 48: a model's own layers, checked against minicomp/ir/reference.py, first time on a GPU)
    step "collect a model's two heaviest layers" 60 collect.txt sh -c "python3 -c \"import onnx; from minicomp \
import zoo; onnx.save(zoo.resnet18(hw=64)[0], '/tmp/r18.onnx')\" && python3 -m minicomp.cli collect --model \
/tmp/r18.onnx --tasks 2 --per-task 8 -o $OUT/timings_model.jsonl"
    tail -n 3 "$OUT/collect.txt" ;;
  *)
    gpu_tests 220
    LEFT=$((${B_SECONDS:-300} - (SECONDS - START)))
    if [ "$LEFT" -gt 30 ]; then
      step "collect (three fp32 tasks outside the eight)" "$LEFT" collect.txt python3 -m minicomp.cli collect \
        -o "$OUT/timings_fp32.jsonl" --per-task 24 --workload 'conv2d(1, 128, 28, 28, 128, 3, pad=1)' \
        --workload 'matmul(128, 512, 128)' --workload 'batch_matmul(4, 128, 128, 64)'
      tail -n 3 "$OUT/collect.txt"
    fi ;;
esac
