#!/usr/bin/env bash
# GPU check of tilepipe.grouped_mm within one device call; logs go to $OUT (or ./gpu-logs). Parts (PARTS, default
# "tests bench"): `tests` (tests/gpu/test_grouped_gpu.py, each case in its own process under a timeout), `sanitize`
# (compute-sanitizer memcheck, racecheck and synccheck over the catalogue's grouped variants, every report judged
# against scripts/sanitize-allow.json: tilepipe.verify.sanitize --only), `bench` (tools/bench_grouped.py: BENCH_NAME,
# default grouped-h200, copied to $OUT), `one-group` (its one-group mode, grouped-one-group-h200) and `masked` (its masked
# mode: the decode case as grouped_mm_masked under CUDA-graph replay, grouped-masked-h200-v3).
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu_env.sh
status=0
for part in ${PARTS:-tests bench}; do
    case "$part" in
    tests)
        timeout "${TESTS_S:-300}" python3 -m pytest -q -m gpu tests/gpu/test_grouped_gpu.py -p no:cacheprovider > "$out/tests.log" 2>&1
        code=$?
        reap_cases
        (exit $code) ;;
    sanitize)
        only=$(python3 -c "from tilepipe.kernels.catalogue import shipped_variants as s; print(','.join(str(i) for i, v in enumerate(s()) if v.kernel.startswith('grouped')))" 2>/dev/null)
        timeout 420 python3 -m tilepipe.verify.sanitize --only "$only" --budget 300 --json "$out/sanitize.json" > "$out/sanitize.log" 2>&1 ;;
    bench)
        timeout "${BENCH_S:-240}" python3 -m tilepipe.tools.bench_grouped "${BENCH_NAME:-grouped-h200}" > "$out/bench.log" 2>&1
        cp "bench/results/${BENCH_NAME:-grouped-h200}.json" "$out/" 2>/dev/null ;;
    one-group)
        timeout "${BENCH_S:-240}" python3 -m tilepipe.tools.bench_grouped grouped-one-group-h200 one-group > "$out/one-group.log" 2>&1
        cp bench/results/grouped-one-group-h200.json "$out/" 2>/dev/null ;;
    masked)
        timeout "${BENCH_S:-240}" python3 -m tilepipe.tools.bench_grouped grouped-masked-h200-v3 masked > "$out/masked.log" 2>&1
        cp bench/results/grouped-masked-h200-v3.json "$out/" 2>/dev/null ;;
    esac
    code=$?
    [ -f "$out/$part.log" ] && grep -v "nanobind\|^ - \|See https" "$out/$part.log" | tail -n 40
    echo "$part exit=$code"
    status=$(( status || code ))
done
exit $status
