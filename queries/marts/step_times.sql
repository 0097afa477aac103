-- How long each profiler step took on each rank: the ProfilerStep#N range on
-- the CPU, and the kernels launched in it. `tracedb query step_times --run v2`;
-- the slowest rank per step: stragglers.
-- Grain: one row per run, rank, phase, step.
-- requires: int_step_sums
-- order by: run, phase, step, rank
CREATE OR REPLACE VIEW step_times AS
SELECT
    run,
    rank,
    phase,
    -- Step number N of ProfilerStep#N.
    step,
    -- ProfilerStep#N.
    min(step_name) AS step_name,
    -- Step start, nanoseconds.
    min(ts_ns) AS ts_ns,
    -- Step duration on the CPU (the ProfilerStep#N range), microseconds.
    sum(dur_ns) / 1e3 AS dur_us,
    -- Kernels launched in the step.
    CAST(sum(kernel_count) AS BIGINT) AS kernel_count,
    -- Summed duration of those kernels, microseconds.
    sum(kernel_ns) / 1e3 AS kernel_us,
    -- First start to last end of those kernels, microseconds; NULL without kernels.
    (max(last_kernel_end_ns) - min(first_kernel_ns)) / 1e3 AS gpu_span_us
FROM int_step_sums
GROUP BY run, rank, phase, step;
