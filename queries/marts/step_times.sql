-- How long each profiler step took on each rank: the ProfilerStep#N range on
-- the CPU, and the kernels launched in it. `tracedb query step_times --run v2`;
-- the slowest rank per step: stragglers.
-- Grain: one row per run, rank, phase, step.
-- requires: int_step_times, int_kernel_launches
-- order by: run, phase, step, rank
CREATE OR REPLACE VIEW step_times AS
WITH kernels AS (
    SELECT run, rank, phase, step, count(*) AS kernel_count, sum(dur_ns) AS kernel_ns,
           min(ts_ns) AS first_kernel_ns, max(end_ns) AS last_kernel_end_ns
    FROM int_kernel_launches
    WHERE step IS NOT NULL
    GROUP BY run, rank, phase, step
)
SELECT
    s.run,
    s.rank,
    s.phase,
    -- Step number N of ProfilerStep#N.
    s.step,
    -- ProfilerStep#N.
    s.step_name,
    -- Step start, nanoseconds.
    s.ts_ns,
    -- Step duration on the CPU (the ProfilerStep#N range), microseconds.
    s.dur_ns / 1e3 AS dur_us,
    -- Kernels launched in the step.
    coalesce(k.kernel_count, 0) AS kernel_count,
    -- Summed duration of those kernels, microseconds.
    coalesce(k.kernel_ns, 0) / 1e3 AS kernel_us,
    -- First start to last end of those kernels, microseconds; NULL without kernels.
    (k.last_kernel_end_ns - k.first_kernel_ns) / 1e3 AS gpu_span_us
FROM int_step_times s
LEFT JOIN kernels k ON k.run = s.run AND k.rank = s.rank AND k.phase = s.phase AND k.step = s.step;
