-- Each profiler step of a trace file with the kernels launched in it (by
-- the step of their launch call). Computed once per trace at ingest, so that
-- step_times and stragglers add up a few rows per step instead of joining
-- every kernel of the warehouse to its launch.
-- Grain: one row per trace file and step.
-- requires: int_steps, int_kernel_launches
-- materialize: per trace
CREATE OR REPLACE VIEW int_step_sums AS
WITH kernels AS (
    SELECT file_id, step, count(*) AS kernel_count, CAST(sum(dur_ns) AS BIGINT) AS kernel_ns,
           min(ts_ns) AS first_kernel_ns, max(end_ns) AS last_kernel_end_ns
    FROM int_kernel_launches
    WHERE step IS NOT NULL
    GROUP BY file_id, step
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
