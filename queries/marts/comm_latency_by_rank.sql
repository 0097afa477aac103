-- comm_latency per rank: calls, percentiles and median bus bandwidth of each
-- collective kind and size bucket (`tracedb query comm_latency --rank N`).
-- Grain: one row per run, rank, phase, library, collective, size bucket and group size.
-- requires: int_comm_latency
-- order by: run, phase, rank, collective, msg_bytes_bucket
CREATE OR REPLACE VIEW comm_latency_by_rank AS
SELECT run, rank, phase, library, collective, msg_bytes_bucket, group_size, min_msg_bytes, max_msg_bytes,
    calls, avg_us, p50_us, p95_us, p99_us, max_us, algbw_gbps, busbw_gbps
FROM int_comm_latency
WHERE is_per_rank;
