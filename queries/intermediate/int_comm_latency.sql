-- Collective latency by library, kind, power-of-two size bucket and group
-- size, over all ranks (is_per_rank false, rank NULL) and per rank (is_per_rank
-- true): what comm_latency and comm_latency_by_rank show.
-- Grain: one row per run, phase, library, collective, size bucket, group size, and rank when is_per_rank.
-- requires: int_collectives
CREATE OR REPLACE VIEW int_comm_latency AS
WITH ops AS (
    SELECT
        *,
        CASE WHEN msg_bytes > 0 THEN CAST(pow(2, floor(log2(msg_bytes))) AS BIGINT)
             WHEN msg_bytes = 0 THEN 0 END AS msg_bytes_bucket
    FROM int_collectives
)
SELECT
    run,
    -- Rank (is_per_rank); NULL over all ranks.
    rank,
    phase,
    -- Communication library (nccl, deepep, gloo, c10d, ...).
    library,
    -- Collective (allreduce, allgather, ...).
    collective,
    -- Size bucket: the largest power of two not above the message size, bytes; NULL when the size is unknown.
    msg_bytes_bucket,
    -- Ranks in the process group; NULL when unknown.
    group_size,
    -- True: one rank; false: all ranks together.
    GROUPING(rank) = 0 AS is_per_rank,
    -- Smallest message in the bucket, bytes.
    min(msg_bytes) AS min_msg_bytes,
    -- Largest message in the bucket, bytes.
    max(msg_bytes) AS max_msg_bytes,
    -- Ranks the collective ran on.
    count(DISTINCT rank) AS rank_count,
    -- Number of ops.
    count(*) AS calls,
    -- Mean latency, microseconds.
    avg(dur_us) AS avg_us,
    -- Median latency (linear interpolation), microseconds.
    quantile_cont(dur_us, 0.5) AS p50_us,
    -- 95th percentile latency (linear interpolation), microseconds.
    quantile_cont(dur_us, 0.95) AS p95_us,
    -- 99th percentile latency (linear interpolation), microseconds.
    quantile_cont(dur_us, 0.99) AS p99_us,
    -- Longest latency, microseconds.
    max(dur_us) AS max_us,
    -- Median algorithm bandwidth, GB/s.
    quantile_cont(algbw_gbps, 0.5) AS algbw_gbps,
    -- Median bus bandwidth, GB/s.
    quantile_cont(busbw_gbps, 0.5) AS busbw_gbps
FROM ops
GROUP BY GROUPING SETS (
    (run, phase, library, collective, msg_bytes_bucket, group_size),
    (run, rank, phase, library, collective, msg_bytes_bucket, group_size)
);
