#!/usr/bin/env bash
# One device call: GPU tests (each case in its own process under a timeout), `python -m tilepipe demo`, then
# `python -m tilepipe bench`, whose table is printed last. Full logs go to $OUT (or ./gpu-logs when run by hand).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-logs}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
{ nvidia-smi; python3 -c 'import torch, triton, sys; print(sys.version); print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name())'; } > "$out/env.txt" 2>&1
python3 -m pytest -q -m gpu tests --junitxml="$out/junit.xml" > "$out/pytest.log" 2>&1
tests=$?
python3 -m tilepipe demo > "$out/demo.log" 2>&1
demo=$?
timeout 400 python3 -m tilepipe bench --name "${BENCH_NAME:-matmul-bf16}" > "$out/bench.log" 2>&1
bench=$?
cp "bench/results/${BENCH_NAME:-matmul-bf16}".{json,png} "$out/" 2>/dev/null
tail -n 3 "$out/env.txt" | head -n 2
grep -E "passed|failed|error" "$out/pytest.log" | tail -n 5
cat "$out/demo.log"
cat "$out/bench.log"
echo "gpu tests exit=$tests, demo exit=$demo, bench exit=$bench"
[ "$tests" -eq 0 ] && [ "$demo" -eq 0 ] && [ "$bench" -eq 0 ]
