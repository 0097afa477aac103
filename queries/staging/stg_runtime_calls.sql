-- CUDA/HIP/MTIA runtime and driver API calls on the CPU (cudaLaunchKernel,
-- cudaMemcpyAsync, ...).
-- Grain: one row per call.
CREATE OR REPLACE VIEW stg_runtime_calls AS
SELECT
    run,
    rank,
    phase,
    file_id,
    event_id,
    -- API name.
    name,
    -- Category: cuda_runtime, cuda_driver, ...
    cat,
    -- Start, nanoseconds.
    ts_ns,
    -- Duration, nanoseconds.
    dur_ns,
    -- End (ts_ns + dur_ns), nanoseconds.
    ts_ns + dur_ns AS end_ns,
    -- Process id.
    pid,
    -- Thread id.
    tid,
    -- Correlation id shared with the kernel or copy it launched.
    correlation,
    -- External id of the CPU op that made the call.
    external_id,
    -- Complete args.
    args
FROM events
WHERE ph = 'X'
  AND lower(cat) IN ('cuda_runtime', 'cuda_driver', 'runtime', 'hip_runtime', 'mtia_runtime', 'cuda_sync')
  AND dur_ns IS NOT NULL;
