-- Calls, total, self and longest time, and exact duration percentiles of
-- every timed operation, from the per-trace sums and duration counts (not
-- the events). Percentiles interpolate linearly between the closest ranks,
-- as quantile_cont does. Three grains: over all ranks ('run': hotspots), per
-- rank ('rank': hotspots_by_rank), and over all ranks with every
-- ProfilerStep#N as one name, ProfilerStep#* ('compare': regressions).
-- Grain: one row per grain, run, rank (grain 'rank'; else NULL), phase, kind and name.
-- requires: int_op_step_sums, int_op_dur_counts
CREATE OR REPLACE VIEW int_op_stats AS
WITH grains AS (
    SELECT * FROM (VALUES ('run'), ('rank'), ('compare')) AS t(grain)
),
sums AS (
    SELECT
        g.grain, s.run, CASE WHEN g.grain = 'rank' THEN s.rank END AS grain_rank, s.phase, s.kind,
        CASE WHEN g.grain = 'compare' AND s.kind = 'annotation' AND regexp_matches(s.name, '^ProfilerStep#[0-9]+$')
             THEN 'ProfilerStep#*' ELSE s.name END AS op_name,
        count(DISTINCT s.rank) AS rank_count,
        sum(s.calls) AS calls,
        sum(s.total_ns) AS total_ns,
        sum(s.self_ns) AS self_ns,
        max(s.max_ns) AS max_ns
    FROM int_op_step_sums s CROSS JOIN grains g
    GROUP BY ALL
),
counts AS (
    SELECT
        g.grain, c.run, CASE WHEN g.grain = 'rank' THEN c.rank END AS grain_rank, c.phase, c.kind,
        CASE WHEN g.grain = 'compare' AND c.kind = 'annotation' AND regexp_matches(c.name, '^ProfilerStep#[0-9]+$')
             THEN 'ProfilerStep#*' ELSE c.name END AS op_name,
        c.dur_ns,
        CAST(sum(c.calls) AS BIGINT) AS calls
    FROM int_op_dur_counts c CROSS JOIN grains g
    GROUP BY ALL
),
cumulative AS (
    SELECT
        *,
        CAST(sum(calls) OVER (PARTITION BY grain, run, grain_rank, phase, kind, op_name ORDER BY dur_ns
                              ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS BIGINT) AS below,
        CAST(sum(calls) OVER (PARTITION BY grain, run, grain_rank, phase, kind, op_name) AS BIGINT) AS total
    FROM counts
),
-- The durations at the 0-based positions floor(q (n - 1)) and ceil(q (n - 1))
-- of the sorted executions: the smallest with more executions at or below it
-- than the position.
closest AS (
    SELECT
        grain, run, grain_rank, phase, kind, op_name,
        any_value(total) AS n,
        min(dur_ns) FILTER (WHERE below > floor(0.5 * (total - 1))) AS p50_lo,
        min(dur_ns) FILTER (WHERE below > ceil(0.5 * (total - 1))) AS p50_hi,
        min(dur_ns) FILTER (WHERE below > floor(0.95 * (total - 1))) AS p95_lo,
        min(dur_ns) FILTER (WHERE below > ceil(0.95 * (total - 1))) AS p95_hi
    FROM cumulative
    GROUP BY grain, run, grain_rank, phase, kind, op_name
)
SELECT
    -- run (all ranks), rank (one rank) or compare (all ranks, steps as ProfilerStep#*).
    s.grain,
    s.run,
    -- Rank (grain 'rank'); NULL otherwise.
    s.grain_rank AS rank,
    s.phase,
    -- kernel, cpu_op or annotation.
    s.kind,
    -- Kernel, op or annotation name.
    s.op_name AS name,
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
    -- Median duration (linear interpolation), nanoseconds.
    c.p50_lo + (0.5 * (c.n - 1) - floor(0.5 * (c.n - 1))) * (c.p50_hi - c.p50_lo) AS p50_ns,
    -- 95th percentile duration (linear interpolation), nanoseconds.
    c.p95_lo + (0.95 * (c.n - 1) - floor(0.95 * (c.n - 1))) * (c.p95_hi - c.p95_lo) AS p95_ns
FROM sums s
JOIN closest c
  ON c.grain = s.grain AND c.run = s.run AND c.grain_rank IS NOT DISTINCT FROM s.grain_rank AND c.phase = s.phase
 AND c.kind = s.kind AND c.op_name = s.op_name;
