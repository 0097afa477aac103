-- Collective latency by kind and message size over all ranks: calls,
-- percentiles, median bus bandwidth and the slowest rank (highest mean
-- latency). Sizes are grouped in power-of-two buckets.
-- `tracedb query comm_latency --run v2`; per rank: comm_latency_by_rank.
-- Grain: one row per run, phase, library, collective, size bucket and group size.
-- requires: int_comm_latency
-- order by: run, phase, collective, msg_bytes_bucket
CREATE OR REPLACE VIEW comm_latency AS
-- int_comm_latency is read twice (all ranks, and per rank for the slowest
-- one): materialized once, not computed twice.
WITH lat AS MATERIALIZED (SELECT * FROM int_comm_latency),
slowest AS (
    SELECT run, phase, library, collective, msg_bytes_bucket, group_size,
           arg_max(rank, (avg_us, -rank)) AS slowest_rank, max(avg_us) AS slowest_rank_avg_us
    FROM lat
    WHERE is_per_rank
    GROUP BY run, phase, library, collective, msg_bytes_bucket, group_size
)
SELECT
    s.run, s.phase, s.library, s.collective, s.msg_bytes_bucket, s.group_size, s.min_msg_bytes, s.max_msg_bytes,
    s.rank_count, s.calls, s.avg_us, s.p50_us, s.p95_us, s.p99_us, s.max_us, s.algbw_gbps, s.busbw_gbps,
    -- Rank with the highest mean latency (lowest rank on ties).
    w.slowest_rank,
    -- Mean latency on that rank, microseconds.
    w.slowest_rank_avg_us
FROM lat s
JOIN slowest w
  ON w.run = s.run AND w.phase = s.phase AND w.library = s.library AND w.collective = s.collective
 AND w.msg_bytes_bucket IS NOT DISTINCT FROM s.msg_bytes_bucket
 AND w.group_size IS NOT DISTINCT FROM s.group_size
WHERE NOT s.is_per_rank;
