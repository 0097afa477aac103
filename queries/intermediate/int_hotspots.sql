-- Kernels, CPU ops and annotations ranked by total time, in microseconds:
-- over all ranks of a run and phase (is_per_rank false: hotspots) and per
-- rank (is_per_rank true: hotspots_by_rank).
-- Grain: one row per run, phase, kind and name, and rank when is_per_rank.
-- requires: int_op_stats
CREATE OR REPLACE VIEW int_hotspots AS
SELECT
    is_per_rank, run, rank, phase, kind,
    -- Kernel / op / annotation name.
    name,
    -- Number of ranks it ran on.
    rank_count,
    -- Number of executions.
    calls,
    -- Summed duration, microseconds.
    total_ns / 1e3 AS total_us,
    -- Summed self time (CPU ops: less child ops on the same thread), microseconds.
    self_ns / 1e3 AS self_us,
    -- Mean duration, microseconds.
    total_ns / calls / 1e3 AS mean_us,
    -- Median duration (linear interpolation), microseconds.
    p50_ns / 1e3 AS p50_us,
    -- 95th percentile duration (linear interpolation), microseconds.
    p95_ns / 1e3 AS p95_us,
    -- Longest duration, microseconds.
    max_ns / 1e3 AS max_us,
    -- Share of the total time of this kind in the run and phase (is_per_rank: and rank), percent.
    100.0 * total_ns / sum(total_ns) OVER (PARTITION BY is_per_rank, run, rank, phase, kind) AS pct_of_total
FROM int_op_stats;
