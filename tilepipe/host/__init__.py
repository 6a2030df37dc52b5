"""Host side of a call: configurations and the cost model, argument checks, staging copies, device facts, call plans
and the one launcher. Imports kernels, schedulers and the pipeline layer, never the torch-facing api above it."""
