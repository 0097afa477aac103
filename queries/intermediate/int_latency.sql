-- Latency of the spans matching a name or SQL LIKE pattern, over all ranks
-- (is_per_rank false, rank NULL) and per rank (is_per_rank true): what latency and
-- latency_by_rank show.
-- Grain: one row per run, phase, kind, clock, and rank when is_per_rank.
-- param span: span name or SQL LIKE pattern (default 'ProfilerStep#%': the profiler steps)
-- requires: int_latency_spans
CREATE OR REPLACE MACRO int_latency(span := 'ProfilerStep#%') AS TABLE
SELECT
    run,
    -- Rank (is_per_rank); NULL over all ranks.
    rank,
    phase,
    -- timer, annotation, cpu_op or kernel.
    kind,
    -- trace, cuda_event or wall (int_latency_spans): never mixed in one row.
    clock,
    -- The name or pattern asked for.
    span AS span_pattern,
    -- True: one rank; false: all ranks together.
    GROUPING(rank) = 0 AS is_per_rank,
    -- Distinct names matched.
    count(DISTINCT name) AS name_count,
    -- Ranks the spans ran on.
    count(DISTINCT rank) AS rank_count,
    -- Number of spans.
    count(*) AS calls,
    -- Mean duration, microseconds.
    avg(dur_ns) / 1e3 AS avg_us,
    -- Median duration (linear interpolation), microseconds.
    quantile_cont(dur_ns, 0.5) / 1e3 AS p50_us,
    -- 95th percentile duration (linear interpolation), microseconds.
    quantile_cont(dur_ns, 0.95) / 1e3 AS p95_us,
    -- 99th percentile duration (linear interpolation), microseconds.
    quantile_cont(dur_ns, 0.99) / 1e3 AS p99_us,
    -- Shortest duration, microseconds.
    min(dur_ns) / 1e3 AS min_us,
    -- Longest duration, microseconds.
    max(dur_ns) / 1e3 AS max_us
FROM int_latency_spans
WHERE name LIKE span
GROUP BY GROUPING SETS ((run, phase, kind, clock), (run, rank, phase, kind, clock));
