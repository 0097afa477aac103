-- Collective latency by kind and message size over all ranks: calls,
-- percentiles, median bus bandwidth and the slowest rank (highest mean
-- latency). Sizes are grouped in power-of-two buckets.
-- `tracedb query comm_latency --run v2`
-- Grain: one row per run, phase, library, collective, size bucket and group size.
-- requires: collectives
-- order by: run, phase, collective, msg_bytes_bucket
CREATE OR REPLACE VIEW comm_latency AS
WITH ops AS (
    SELECT
        *,
        CASE WHEN msg_bytes > 0 THEN CAST(pow(2, floor(log2(msg_bytes))) AS BIGINT) WHEN msg_bytes = 0 THEN 0 END AS msg_bytes_bucket
    FROM collectives
),
per_rank AS (
    SELECT run, phase, library, collective, msg_bytes_bucket, group_size, rank, avg(dur_us) AS rank_avg_us
    FROM ops
    GROUP BY ALL
),
slowest AS (
    SELECT run, phase, library, collective, msg_bytes_bucket, group_size,
           arg_max(rank, (rank_avg_us, -rank)) AS slowest_rank, max(rank_avg_us) AS slowest_rank_avg_us
    FROM per_rank
    GROUP BY ALL
),
stats AS (
    SELECT
        run, phase, library, collective, msg_bytes_bucket, group_size,
        min(msg_bytes) AS min_msg_bytes,
        max(msg_bytes) AS max_msg_bytes,
        count(DISTINCT rank) AS rank_count,
        count(*) AS calls,
        avg(dur_us) AS avg_us,
        quantile_cont(dur_us, 0.5) AS p50_us,
        quantile_cont(dur_us, 0.95) AS p95_us,
        quantile_cont(dur_us, 0.99) AS p99_us,
        max(dur_us) AS max_us,
        quantile_cont(algbw_gbps, 0.5) AS algbw_gbps,
        quantile_cont(busbw_gbps, 0.5) AS busbw_gbps
    FROM ops
    GROUP BY ALL
)
SELECT
    s.run,
    s.phase,
    -- Communication library (nccl, deepep, gloo, c10d, ...).
    s.library,
    -- Collective (allreduce, allgather, ...).
    s.collective,
    -- Size bucket: the largest power of two not above the message size, bytes; NULL when the size is unknown.
    s.msg_bytes_bucket,
    -- Ranks in the process group; NULL when unknown.
    s.group_size,
    -- Smallest message in the bucket, bytes.
    s.min_msg_bytes,
    -- Largest message in the bucket, bytes.
    s.max_msg_bytes,
    -- Ranks the collective ran on.
    s.rank_count,
    -- Number of ops, all ranks.
    s.calls,
    -- Mean latency, microseconds.
    s.avg_us,
    -- Median latency (linear interpolation), microseconds.
    s.p50_us,
    -- 95th percentile latency (linear interpolation), microseconds.
    s.p95_us,
    -- 99th percentile latency (linear interpolation), microseconds.
    s.p99_us,
    -- Longest latency, microseconds.
    s.max_us,
    -- Median algorithm bandwidth, GB/s.
    s.algbw_gbps,
    -- Median bus bandwidth, GB/s.
    s.busbw_gbps,
    -- Rank with the highest mean latency (lowest rank on ties).
    w.slowest_rank,
    -- Mean latency on that rank, microseconds.
    w.slowest_rank_avg_us
FROM stats s
JOIN slowest w
  ON w.run = s.run AND w.phase = s.phase AND w.library = s.library AND w.collective = s.collective
 AND w.msg_bytes_bucket IS NOT DISTINCT FROM s.msg_bytes_bucket
 AND w.group_size IS NOT DISTINCT FROM s.group_size;
