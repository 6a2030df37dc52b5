#!/usr/bin/env bash
# GPU check: GPU tests (each case in its own process under a timeout) and `python -m tilepipe demo`, then
# `python -m tilepipe bench` (bf16 and FP8 families), whose table is printed last. Full logs go to $OUT (or ./gpu-logs
# when run by hand). `bash scripts/gpu_check.sh PART` runs one part, each within one 10-minute device call (the whole
# takes longer, so run the parts as separate calls on the same warm machine): `tests` (GPU tests; `tests-matmul` and
# `tests-rest` split them in two), `demo`, `bench`,
# `sweep` (the randomized sweep against float64, tilepipe/verify/sweep.py, then the invalid-argument fuzz on CUDA
# tensors, tests/fuzz_args.py) and `sanitize` (compute-sanitizer memcheck, racecheck and synccheck over every shipped
# variant, tilepipe/verify/sanitize.py; fails on a report scripts/sanitize-allow.json does not explain). Every log
# names the Triton it ran. `clusters` (issue 18, about 6 minutes): `python -m tilepipe bench --clusters`.
# `epilogues` (issue 40, at most 7 minutes): the fused epilogues' GPU cases (test_linear_gpu, test_linear_fp8_gpu,
# test_grouped_epilogues_gpu, test_llama_gpu), then tools/bench_epilogues.py (epilogues-h200.json) into $OUT.
# `split` (issue 42, at most 6 minutes): split multicast's GPU cases (tests/gpu/test_split_gpu.py: every split cluster
# GEMM under every scheduler, a CUDA-graph replay, the debug-mode hang of a release that skips the peer), then
# tools/bench_clusters.py's split table (split-h200-v2.json: split against leader-issued, no cluster and torch) into $OUT.
# `shapes` (issue 20, about 6 minutes): `python -m tilepipe bench --shapes`
# (bench/results/shapes-h100.json, copied to $OUT), then the split-K, swap-AB, narrow-tile, pieced-tile, sub-tiled,
# ping-pong and FP8 stream-K GPU cases, one process each.
set -uo pipefail
part="${1:-all}"
cd "$(dirname "$0")/.."
. scripts/gpu_env.sh
python3 -c 'import triton; print("triton", triton.__version__, "from", triton.__file__)'
python3 -c 'import triton, sys; sys.exit(not triton.__version__.startswith("3.9."))' || { echo "tilepipe needs triton 3.9" >&2; exit 1; }
tests=0 demo=0 bench=0 sweep=0 fuzz=0 sanitize=0
runs() { [ "$part" = all ] || [ "$part" = "$1" ] || { [ "$1" = tests ] && [[ "$part" =~ ^tests-(matmul|rest)$ ]]; }; }
if [ "$part" = clusters ]; then  # issue 18's table (tilepipe/tools/bench_clusters.py), about 6 minutes
    name="${BENCH_NAME:-clusters-h100}"
    timeout 570 python3 -m tilepipe bench --clusters --pairs 5 --name "$name" > "$out/bench.log" 2>&1
    bench=$?
    cp "bench/results/$name.json" "$out/" 2>/dev/null
    cat "$out/bench.log"
    echo "bench --clusters exit=$bench"
    exit $bench
fi
if [ "$part" = epilogues ]; then  # issue 40: the fused epilogues' GPU cases, then their bench (at most 7 minutes)
    timeout 240 python3 -m pytest -q -m gpu tests/gpu/test_linear_gpu.py tests/gpu/test_linear_fp8_gpu.py \
        tests/gpu/test_grouped_epilogues_gpu.py tests/gpu/test_llama_gpu.py --junitxml="$out/junit.xml" \
        > "$out/pytest.log" 2>&1
    tests=$?
    reap_cases
    tail -60 "$out/pytest.log"
    name="${BENCH_NAME:-epilogues-h200}"
    timeout 170 python3 -m tilepipe.tools.bench_epilogues "$name" "$out" > "$out/bench.log" 2>&1
    bench=$?
    cat "$out/bench.log"
    echo "epilogue gpu cases exit=$tests, bench_epilogues exit=$bench"
    [ "$tests" -eq 0 ] && [ "$bench" -eq 0 ]
    exit
fi
if [ "$part" = split ]; then  # issue 42: split multicast's GPU cases, then its table (at most 6 minutes; ~4 expected)
    timeout 150 python3 -m pytest -q -m gpu tests/gpu/test_split_gpu.py --junitxml="$out/junit.xml" \
        > "$out/pytest.log" 2>&1
    tests=$?
    reap_cases
    tail -60 "$out/pytest.log"
    name="${BENCH_NAME:-split-h200-v2}"  # a budget of 170 s (a child process per launch: a fault is a 'missing' row)
    timeout 190 python3 -m tilepipe.tools.bench_clusters "$name" "$out" 170 > "$out/bench.log" 2>&1
    bench=$?
    cat "$out/bench.log"
    echo "split gpu cases exit=$tests, bench_clusters split exit=$bench"
    [ "$tests" -eq 0 ] && [ "$bench" -eq 0 ]
    exit
fi
if [ "$part" = shapes ]; then
    name="${BENCH_NAME:-shapes-h100}"
    timeout 450 python3 -m tilepipe bench --shapes --pairs 3 --name "$name" > "$out/bench.log" 2>&1
    bench=$?
    cp "bench/results/$name.json" "$out/" 2>/dev/null
    pids=()
    for case in "matmul_cases splitk bf16 bf16 kmajor" "matmul_cases splitk fp16 fp32 rowmajor" \
                "scheduler_cases launches splitk bf16" "scheduler_cases launches splitk fp32" \
                "scheduler_cases graphs splitk" "scheduler_cases bias splitk" "scheduler_cases launches default fp32" \
                "fp8_cases tensor e4m3 e4m3 bf16 streamk" "fp8_cases row e4m3 e5m2 fp32 splitk" \
                "fp8_cases blockwise e4m3 e4m3 bf16 streamk" "fp8_cases blockwise e4m3 e4m3 bf16 splitk" \
                "fp8_cases tensor e4m3 e4m3 bf16" "matmul_cases swap 64 static bf16" "matmul_cases swap 64 splitk fp32" \
                "fp8_cases tensor e4m3 e4m3 bf16 swap-static" "fp8_cases row e4m3 e5m2 fp32 swap-splitk" \
                "matmul_cases narrow bf16 bf16 kmajor" "matmul_cases pieced bf16 bf16 kmajor static" \
                "matmul_cases subtiled bf16 bf16 kmajor static" "matmul_cases pingpong bf16 bf16 kmajor"; do
        set -- $case
        # printf's leading newline: triton 3.9's exit notes end without one
        (timeout 100 python3 -m "tests.gpu.$1" "${@:2}" > "$out/${case// /_}.log" 2>&1; printf '\nexit=%s\n' $? >> "$out/${case// /_}.log") &
        pids+=($!)
    done
    wait "${pids[@]}"
    grep -h '^{' "$out"/*_cases_*.log | cut -c1-400
    grep -L '^exit=0$' "$out"/*_cases_*.log | sed 's/^/FAILED: /'
    [ -n "$(grep -L '^exit=0$' "$out"/*_cases_*.log)" ] && tests=1
    tar -czf "$out/cases.tgz" -C "$out" $(cd "$out" && ls *_cases_*.log) && rm -f "$out"/*_cases_*.log  # one file back
    cat "$out/bench.log"
    echo "split-K / swap-AB gpu cases exit=$tests, bench --shapes exit=$bench"
    [ "$tests" -eq 0 ] && [ "$bench" -eq 0 ]
    exit
fi
if runs tests; then  # about 9.5 minutes on an H100 (203 cases), at the edge of one call: tests-matmul (about 3.5
    # minutes, tests/gpu/test_matmul_gpu.py) and tests-rest (the others, about 6) split it over two calls
    case "$part" in
        tests-matmul) selected=(tests/gpu/test_matmul_gpu.py) ;;
        tests-rest) selected=(tests --ignore=tests/gpu/test_matmul_gpu.py --ignore=tests/gpu/test_split_gpu.py) ;;
        *) selected=(tests) ;;
    esac
    timeout 570 python3 -m pytest -q -m gpu "${selected[@]}" --junitxml="$out/junit.xml" > "$out/pytest.log" 2>&1
    tests=$?
    reap_cases
fi
if runs demo; then
    timeout 110 python3 -m tilepipe demo > "$out/demo.log" 2>&1
    demo=$?
fi
if runs bench; then
    name="${BENCH_NAME:-matmul-bf16}"
    timeout 560 python3 -m tilepipe bench --name "$name" > "$out/bench.log" 2>&1
    bench=$?
    cp "bench/results/$name".{json,png} "bench/results/$name-fp8.json" "$out/" 2>/dev/null
fi
if runs sweep; then
    timeout 360 python3 -m tilepipe.verify.sweep --json "$out/sweep.json" > "$out/sweep.log" 2>&1
    sweep=$?
    timeout 150 python3 -m tests.fuzz_args --json "$out/fuzz.json" > "$out/fuzz.log" 2>&1
    fuzz=$?
fi
if runs sanitize; then
    timeout 540 python3 -m tilepipe.verify.sanitize --json "$out/sanitize.json" > "$out/sanitize.log" 2>&1
    sanitize=$?
fi
tail -n 3 "$out/env.txt" | head -n 2
runs tests && grep -E "passed|failed|error" "$out/pytest.log" | tail -n 5
runs demo && cat "$out/demo.log"
runs bench && cat "$out/bench.log"
runs sweep && head -c 6000 "$out/sweep.log" && tail -c 4000 "$out/fuzz.log"
runs sanitize && head -c 12000 "$out/sanitize.log"
echo "gpu tests exit=$tests, demo exit=$demo, bench exit=$bench, sweep exit=$sweep, fuzz exit=$fuzz, sanitize exit=$sanitize"
[ "$tests" -eq 0 ] && [ "$demo" -eq 0 ] && [ "$bench" -eq 0 ] && [ "$sweep" -eq 0 ] && [ "$fuzz" -eq 0 ] && \
    [ "$sanitize" -eq 0 ]
