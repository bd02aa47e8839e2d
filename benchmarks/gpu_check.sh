#!/usr/bin/env bash
# The GPU check: one prepared run on a machine with a CUDA device, in under 10 minutes, printing the figures
# a closing note needs. Steps end by themselves (a timeout each); one that fails does not stop the others.
#
#   benchmarks/gpu_check.sh            # on the GPU box (the venv of the README's test command)
#   benchmarks/gpu_check.sh --cpu      # the same steps on the CPU with tiny models only: a dry run, ~2 min
#
# 1. the tests marked gpu (half precision, placement on cuda:N, the CUDA cache emptied on eviction);
# 2. every expert tool on its tiny model on the device: load, warm latency, 8 sequential vs 8 concurrent calls;
# 3. the real default models that are already on disk (nothing is downloaded), the same figures;
# 4. the memory of every diffusion tool loaded at once: one shared Stable Diffusion base vs a copy per tool
#    (real models when they are on disk, else the real architectures' sizes);
# 5. cold models racing: fresh processes, 8 threads calling cold tools at once, float16 on the GPU.
set -u
cd "$(dirname "$0")/.." || exit 1
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
DEVICE=cuda
QUICK=0
if [ "${1:-}" = "--cpu" ]; then
  DEVICE=cpu
  QUICK=1
fi
export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1}  # measure what is on disk; never start a download

step() { printf '\n== %s\n' "$*"; }
run() {  # run SECONDS COMMAND...: a step with its own time limit
  local limit=$1
  shift
  timeout "$limit" "$@"
  local status=$?
  [ "$status" -eq 0 ] || echo "(this step ended with status $status)"
}

step "environment"
run 60 "$PY" - <<'PY'
import platform, torch
print("python", platform.python_version(), "| torch", torch.__version__, "| cuda", torch.version.cuda)
if torch.cuda.is_available():
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        print(f"cuda:{i} {p.name}, {p.total_memory / 2**30:.0f} GiB")
else:
    print("no CUDA device: running on the CPU")
PY

if [ "$QUICK" -eq 0 ]; then
  step "1. the gpu tests"
  run 150 "$PY" -m pytest -q -p no:cacheprovider -m gpu tests
fi

step "2. every expert tool on its tiny model ($DEVICE): load, warm latency, 8 calls in sequence and at once"
run 150 "$PY" benchmarks/experts.py --device "$DEVICE" --calls 8

if [ "$QUICK" -eq 0 ]; then
  step "3. the real default models that are on disk ($DEVICE)"
  run 150 "$PY" benchmarks/experts.py --real --present-only --device "$DEVICE" --calls 8
fi

step "4. all diffusion tools loaded at once: one shared base vs a copy per tool"
if [ "$QUICK" -eq 0 ]; then
  run 60 "$PY" benchmarks/diffusion_memory.py --real --device "$DEVICE"
fi
run 30 "$PY" benchmarks/diffusion_memory.py --shapes

step "5. cold models racing in fresh processes ($DEVICE)"
run 60 "$PY" benchmarks/cold_loads.py --device "$DEVICE" --processes "$([ "$QUICK" -eq 1 ] && echo 2 || echo 5)"
