-- Exact duration percentiles of every timed operation, read from the
-- per-trace duration counts (int_op_dur_counts), not the events: linear
-- interpolation between the closest ranks, as quantile_cont computes them.
-- Three grains, told apart by two flags: over all ranks (both false), per
-- rank (is_per_rank), and over all ranks with every ProfilerStep#N as one
-- name, ProfilerStep#* (is_compare_name: what regressions compares).
-- Grain: one row per run, phase, kind and name, and rank when is_per_rank, for each of the three grains.
-- requires: int_op_dur_counts
CREATE OR REPLACE VIEW int_op_percentiles AS
WITH grains AS (
    SELECT * FROM (VALUES (false, false), (true, false), (false, true)) AS t(is_per_rank, is_compare_name)
),
counts AS (
    SELECT
        g.is_per_rank, g.is_compare_name, c.run, CASE WHEN g.is_per_rank THEN c.rank END AS grain_rank, c.phase,
        c.kind, CASE WHEN g.is_compare_name THEN c.compare_name ELSE c.name END AS op_name,
        c.dur_ns,
        CAST(sum(c.calls) AS BIGINT) AS calls
    FROM int_op_dur_counts c CROSS JOIN grains g
    GROUP BY ALL
),
cumulative AS (
    SELECT
        *,
        CAST(sum(calls) OVER (PARTITION BY is_per_rank, is_compare_name, run, grain_rank, phase, kind, op_name
                              ORDER BY dur_ns
                              ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS BIGINT) AS below,
        CAST(sum(calls) OVER (PARTITION BY is_per_rank, is_compare_name, run, grain_rank, phase, kind, op_name)
                  AS BIGINT) AS total
    FROM counts
),
-- The durations at the 0-based positions floor(q (n - 1)) and ceil(q (n - 1))
-- of the sorted executions: the smallest with more executions at or below it
-- than the position.
closest AS (
    SELECT
        is_per_rank, is_compare_name, run, grain_rank, phase, kind, op_name,
        any_value(total) AS n,
        min(dur_ns) FILTER (WHERE below > floor(0.5 * (total - 1))) AS p50_lo,
        min(dur_ns) FILTER (WHERE below > ceil(0.5 * (total - 1))) AS p50_hi,
        min(dur_ns) FILTER (WHERE below > floor(0.95 * (total - 1))) AS p95_lo,
        min(dur_ns) FILTER (WHERE below > ceil(0.95 * (total - 1))) AS p95_hi
    FROM cumulative
    GROUP BY is_per_rank, is_compare_name, run, grain_rank, phase, kind, op_name
)
SELECT
    -- True: one rank; false: all ranks together.
    is_per_rank,
    -- True: over all ranks, every ProfilerStep#N named ProfilerStep#* (regressions); false: by name.
    is_compare_name,
    run,
    -- Rank (is_per_rank); NULL otherwise.
    grain_rank AS rank,
    phase,
    -- kernel, cpu_op or annotation.
    kind,
    -- Kernel, op or annotation name.
    op_name AS name,
    -- Median duration (linear interpolation), nanoseconds.
    p50_lo + (0.5 * (n - 1) - floor(0.5 * (n - 1))) * (p50_hi - p50_lo) AS p50_ns,
    -- 95th percentile duration (linear interpolation), nanoseconds.
    p95_lo + (0.95 * (n - 1) - floor(0.95 * (n - 1))) * (p95_hi - p95_lo) AS p95_ns
FROM closest;
