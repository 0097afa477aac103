-- Calls, total, self and longest time of every timed operation from the
-- per-trace sums (int_op_step_sums), with its exact percentiles
-- (int_op_percentiles): what hotspots reads, over all ranks (is_per_rank
-- false, rank NULL) and per rank (is_per_rank true).
-- Grain: one row per run, phase, kind and name, and rank when is_per_rank.
-- requires: int_op_step_sums, int_op_percentiles
CREATE OR REPLACE VIEW int_op_stats AS
WITH all_ranks AS (
    SELECT
        false AS is_per_rank, run, NULL::BIGINT AS rank, phase, kind, name,
        count(DISTINCT rank) AS rank_count,
        sum(calls) AS calls,
        sum(total_ns) AS total_ns,
        sum(self_ns) AS self_ns,
        max(max_ns) AS max_ns
    FROM int_op_step_sums
    GROUP BY run, phase, kind, name
),
per_rank AS (
    SELECT
        true AS is_per_rank, run, rank, phase, kind, name,
        1 AS rank_count,
        sum(calls) AS calls,
        sum(total_ns) AS total_ns,
        sum(self_ns) AS self_ns,
        max(max_ns) AS max_ns
    FROM int_op_step_sums
    GROUP BY run, rank, phase, kind, name
),
-- Each grain joins its own percentiles, the grain written as a constant:
-- a query's filter on is_per_rank or rank then reaches int_op_percentiles'
-- grains, and the percentiles of the grain it does not ask for are not
-- computed (hotspots of a 128-rank warehouse: 0.1 s instead of 0.8).
sums AS (
    SELECT s.*, p.p50_ns, p.p95_ns
    FROM all_ranks s
    JOIN int_op_percentiles p
      ON NOT p.is_per_rank AND NOT p.is_compare_name AND p.run = s.run AND p.phase = s.phase
     AND p.kind = s.kind AND p.name = s.name
    UNION ALL
    SELECT s.*, p.p50_ns, p.p95_ns
    FROM per_rank s
    JOIN int_op_percentiles p
      ON p.is_per_rank AND NOT p.is_compare_name AND p.run = s.run AND p.rank = s.rank AND p.phase = s.phase
     AND p.kind = s.kind AND p.name = s.name
)
SELECT
    -- True: one rank; false: all ranks together.
    s.is_per_rank,
    s.run,
    -- Rank (is_per_rank); NULL otherwise.
    s.rank,
    s.phase,
    -- kernel, cpu_op or annotation.
    s.kind,
    -- Kernel, op or annotation name.
    s.name,
    -- Ranks it ran on.
    s.rank_count,
    -- Executions.
    CAST(s.calls AS BIGINT) AS calls,
    -- Summed duration, nanoseconds.
    CAST(s.total_ns AS BIGINT) AS total_ns,
    -- Summed self time, nanoseconds.
    CAST(s.self_ns AS BIGINT) AS self_ns,
    -- Longest duration, nanoseconds.
    s.max_ns,
    s.p50_ns,
    s.p95_ns
FROM sums s;
