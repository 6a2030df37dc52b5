# Sourced by the GPU scripts from the repository root: the log folder ($OUT, or ./gpu-logs by hand) in $out, unbuffered
# Python, and Triton 3.9 first on the path. The GPU image's own Triton is older than the one tilepipe needs: unpack the
# bundle that ../shared/tools/triton-bundle.sh packs into .whl/ (carried with the repo) where there is one.
out="${OUT:-gpu-logs}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
bundle=$(ls .whl/triton-*.tar.xz 2>/dev/null | head -n 1)
if [ -n "$bundle" ]; then
    mkdir -p /tmp/site && tar -xJf "$bundle" -C /tmp/site && . /tmp/site/activate-triton.sh || exit 1
fi
{ nvidia-smi; python3 -c 'import torch, triton, sys; print(sys.version); print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name())'; } > "$out/env.txt" 2>&1
reap_cases() {  # each GPU case runs in its own session (a hung one is killed by group): a pytest that hit its
    # `timeout` leaves its running cases behind, which would share the GPU with the next part: end them
    pkill -KILL -f -- '-m tests\.gpu\.' 2>/dev/null
    return 0
}
