#!/bin/bash
# The CUDA path on a machine with a GPU: the CUDA tests, then every simple_spread example trained
# briefly with --device cuda and evaluated; prints one line per example and writes the whole
# report to benchmarks/results/cuda_check.txt.
#   bash benchmarks/cuda_check.sh [timesteps per example, default 30000]
set -u
cd "$(dirname "$0")/.."
timesteps=${1:-30000}
report=benchmarks/results/cuda_check.txt
export TQDM_DISABLE=1
{
  echo "# $(date -u +%F) $(python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))')"
  python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py tests/test_device_placement.py 2>&1 | tail -3
  for example in mappo ippo maddpg matd3 masac qmix vdn recurrent_mappo; do
    log=$(mktemp)
    python3 examples/mpe/simple_spread_$example.py --device cuda --timesteps "$timesteps" --episodes 8 \
      --directory "$(mktemp -d)" > "$log" 2>&1
    echo "example $example on cuda: exit status $?; $(grep -E '^trained|^greedy' "$log" | tr '\n' ' ')"
    rm -f "$log"
  done
} | tee "$report"
