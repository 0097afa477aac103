-- Time per user annotation name, over all ranks (is_per_rank false, rank NULL)
-- and per rank (is_per_rank true): what annotations and annotations_by_rank show.
-- Grain: one row per run, phase, name, and rank when is_per_rank.
-- requires: int_annotation_calls
CREATE OR REPLACE VIEW int_annotation_stats AS
SELECT
    run,
    -- Rank (is_per_rank); NULL over all ranks.
    rank,
    phase,
    -- Annotation name.
    name,
    -- True: one rank; false: all ranks together.
    GROUPING(rank) = 0 AS is_per_rank,
    -- Ranks it ran on.
    count(DISTINCT rank) AS rank_count,
    -- Number of calls.
    count(*) AS calls,
    -- Summed CPU duration, microseconds.
    sum(dur_ns) / 1e3 AS cpu_total_us,
    -- Mean CPU duration, microseconds.
    avg(dur_ns) / 1e3 AS cpu_avg_us,
    -- Median CPU duration (linear interpolation), microseconds.
    quantile_cont(dur_ns, 0.5) / 1e3 AS cpu_p50_us,
    -- Longest CPU duration, microseconds.
    max(dur_ns) / 1e3 AS cpu_max_us,
    -- Summed CPU self time (less child slices on the thread), microseconds.
    sum(self_ns) / 1e3 AS cpu_self_us,
    -- Kernels launched inside it.
    CAST(sum(kernel_count) AS BIGINT) AS kernel_count,
    -- Summed GPU duration of those kernels, microseconds.
    sum(kernel_ns) / 1e3 AS gpu_kernel_us,
    -- GPU kernel time per call, microseconds.
    sum(kernel_ns) / 1e3 / count(*) AS gpu_kernel_avg_us
FROM int_annotation_calls
GROUP BY GROUPING SETS ((run, phase, name), (run, rank, phase, name));
