#!/usr/bin/env bash
# GPU check of tilepipe.grouped_mm within one device call: its GPU tests (tests/gpu/test_grouped_gpu.py, each case in
# its own process under a timeout), then `python -m tilepipe.tools.bench_grouped` (bench/results/grouped-h200.json,
# copied to $OUT). Logs go to $OUT (or ./gpu-logs).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-logs}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
bundle=$(ls .whl/triton-*.tar.xz 2>/dev/null | head -n 1)
if [ -n "$bundle" ]; then
    mkdir -p /tmp/site && tar -xJf "$bundle" -C /tmp/site && . /tmp/site/activate-triton.sh || exit 1
fi
{ nvidia-smi; python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name())'; } > "$out/env.txt" 2>&1
timeout "${TESTS_S:-300}" python3 -m pytest -q -m gpu tests/gpu/test_grouped_gpu.py -p no:cacheprovider > "$out/tests.log" 2>&1
tests=$?
tail -n 60 "$out/tests.log"
echo "tests exit=$tests"
[ "${BENCH:-1}" = 1 ] || exit $tests
name="${BENCH_NAME:-grouped-h200}"
timeout "${BENCH_S:-240}" python3 -m tilepipe.tools.bench_grouped "$name" > "$out/bench.log" 2>&1
bench=$?
cp "bench/results/$name.json" "$out/" 2>/dev/null
tail -n 40 "$out/bench.log"
echo "bench exit=$bench"
exit $(( tests || bench ))
