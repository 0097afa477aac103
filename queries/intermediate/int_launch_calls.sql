-- The CPU-side runtime/driver call behind each correlation id
-- (cudaLaunchKernel, cuLaunchKernel, hipLaunchKernel, cudaMemcpyAsync, ...)
-- with the profiler step it was made in. Kernels and copies join it on
-- correlation. GPU-side sync events (cat cuda_sync) that repeat a
-- correlation are left out; of several calls, the earliest is kept.
-- Grain: one row per run, rank, phase, trace file and correlation id.
-- requires: stg_runtime_calls, int_step_buckets
CREATE OR REPLACE VIEW int_launch_calls AS
WITH flat AS (
    SELECT run, rank, phase, file_id, correlation, event_id, name, ts_ns, dur_ns, pid, tid, external_id
    FROM stg_runtime_calls
    WHERE correlation IS NOT NULL AND lower(cat) <> 'cuda_sync'
    QUALIFY row_number() OVER (PARTITION BY file_id, correlation ORDER BY ts_ns, event_id) = 1
)
SELECT
    c.run, c.rank, c.phase, c.file_id,
    -- Correlation id shared with the kernel or copy the call started.
    c.correlation,
    -- Event id of the call.
    c.event_id,
    -- API name (cudaLaunchKernel, ...).
    c.name,
    -- Call start, nanoseconds.
    c.ts_ns,
    -- Call duration, nanoseconds.
    c.dur_ns,
    -- Process id of the calling thread.
    c.pid,
    -- Calling thread.
    c.tid,
    -- External id of the CPU op that made the call.
    c.external_id,
    -- Profiler step whose ProfilerStep#N range holds the call start; NULL outside steps.
    s.step
FROM flat c
LEFT JOIN (SELECT DISTINCT file_id, width_ns FROM int_step_buckets) w
    ON w.file_id = c.file_id
LEFT JOIN int_step_buckets s
    ON s.file_id = c.file_id
   AND s.bucket = c.ts_ns // w.width_ns AND c.ts_ns >= s.start_ns AND c.ts_ns < s.end_ns;
