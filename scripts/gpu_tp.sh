#!/usr/bin/env bash
# GPU check of tilepipe.distributed on 2 GPUs (nvidia-h200-x2), logs to $OUT (or ./gpu-logs). Every torchrun
# (python3 -m torch.distributed.run) runs under `timeout`, so a hung rank ends its part instead of the script.
# Parts (PARTS, default "tests hang bench"): `tests` (tests/gpu/tp_cases.py: both ops vs float64, 16-bit and FP8,
# graph replays, torch.compile, bad arguments), `hang` (a skipped call named by debug mode, all-gather then
# reduce-scatter), `bench` (tilepipe/tools/bench_tp.py: bench/results/tp-h200x2.json, copied to $OUT, its table
# printed last). Limits 150 + 150 + 45 + 45 + 90 s (8 minutes). NVLink multicast is off on these machines, and
# must stay off.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu_env.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, "cuda",
torch.version.cuda)
for i in range(torch.cuda.device_count()): print("GPU", i, torch.cuda.get_device_name(i))'
nvidia-smi topo -m 2>/dev/null | head -n 4
torchrun_part() {  # name, timeout in seconds, then the arguments after torchrun's (2 processes, one per GPU)
    local name=$1 limit=$2
    shift 2
    echo "=== $name: python3 -m torch.distributed.run --nproc-per-node 2 $* (timeout ${limit}s)"
    timeout -k 10 "$limit" python3 -m torch.distributed.run --nproc-per-node 2 "$@" > "$out/$name.log" 2>&1
    local code=$?
    [ $code -eq 124 ] && echo "$name: TIMED OUT after ${limit}s"
    grep -E '^\{|\[rank [0-9]\] (case|bench)' "$out/$name.log" | cut -c 1-400 | tail -n 40
    if [ $code -ne 0 ]; then  # what went wrong, from the ranks' own output
        grep -v -E '^\{|nanobind' "$out/$name.log" | tail -n 30
    fi
    echo "$name exit=$code"
    return $code
}
status=0
for part in ${PARTS:-tests hang bench}; do
    case "$part" in
    tests)  # two torchruns: a fault in one op's kernels (a lost CUDA context) leaves the other's results
        torchrun_part tests-ag "${TESTS_S:-150}" -m tests.gpu.tp_cases ag-bf16-rowmajor ag-bf16-kmajor \
            ag-fp16-rowmajor ag-fp16-kmajor ag-fp8-kmajor badargs compile
        code=$?
        torchrun_part tests-rs "${TESTS_S:-150}" -m tests.gpu.tp_cases rs-bf16-rowmajor rs-bf16-kmajor \
            rs-fp16-rowmajor rs-fp16-kmajor rs-fp8-kmajor graph
        code=$(( code || $? )) ;;
    hang)
        torchrun_part hang-ag 45 -m tests.gpu.tp_cases hang-ag
        code=$?
        torchrun_part hang-rs 45 -m tests.gpu.tp_cases hang-rs
        code=$(( code || $? )) ;;
    bench)
        torchrun_part bench "${BENCH_S:-90}" -m tilepipe.tools.bench_tp "${BENCH_NAME:-tp-h200x2}"
        code=$?
        cp "bench/results/${BENCH_NAME:-tp-h200x2}.json" "$out/" 2>/dev/null
        sed -n -E '/^op +shape/,$p' "$out/bench.log" | grep -v '^\[rank' ;;
    esac
    status=$(( status || code ))
done
exit $status
