-- Each profiler step of a trace file with the kernels launched in it (by
-- the step of their launch call, int_launch_steps). Computed once per trace
-- at ingest, so that step_times and stragglers add up a few rows per step
-- instead of joining every kernel of the warehouse to its launch.
-- Grain: one row per trace file and step.
-- requires: int_steps, stg_kernels, int_launch_steps
-- materialize: per trace
CREATE OR REPLACE VIEW int_step_sums AS
WITH kernels AS (
    SELECT k.file_id, l.step, count(*) AS kernel_count, CAST(sum(k.dur_ns) AS BIGINT) AS kernel_ns,
           min(k.ts_ns) AS first_kernel_ns, max(k.end_ns) AS last_kernel_end_ns
    FROM stg_kernels k
    JOIN int_launch_steps l
        ON l.file_id = k.file_id
       AND l.correlation = k.correlation
    WHERE l.step IS NOT NULL
    GROUP BY k.file_id, l.step
)
SELECT
    s.run, s.rank, s.phase, s.file_id,
    -- Step number N of ProfilerStep#N.
    s.step,
    -- ProfilerStep#N.
    s.step_name,
    -- Step start, nanoseconds.
    s.ts_ns,
    -- Step duration on the CPU, nanoseconds.
    s.dur_ns,
    -- Kernels launched in the step.
    coalesce(k.kernel_count, 0) AS kernel_count,
    -- Summed duration of those kernels, nanoseconds.
    coalesce(k.kernel_ns, 0) AS kernel_ns,
    -- Start of the first of those kernels, nanoseconds; NULL without kernels.
    k.first_kernel_ns,
    -- End of the last of those kernels, nanoseconds; NULL without kernels.
    k.last_kernel_end_ns
FROM int_steps s
LEFT JOIN kernels k ON k.file_id = s.file_id AND k.step = s.step;
