-- Memory traffic per rank and direction: copies (HtoD, DtoH, DtoD, PtoP)
-- and memsets, their bytes, their time on the GPU and the bandwidth reached
-- (bytes over summed duration; 1 byte/ns = 1 GB/s). HTA's
-- get_memory_bw_summary describes the bandwidth the trace reports per copy;
-- here the bandwidth is recomputed from bytes and durations, and copies of 0
-- ns count in the bytes but give no per-copy bandwidth (HTA rounds them up
-- to 1 us). `tracedb query memory_bandwidth --rank 0`
-- Grain: one row per run, rank, phase and kind.
-- requires: int_memory_ops
-- order by: run, phase, rank, kind
CREATE OR REPLACE VIEW memory_bandwidth_by_rank AS
SELECT
    run, rank, phase,
    -- HtoD, DtoH, DtoD, PtoP or memset.
    kind,
    -- Copies or memsets.
    count(*) AS op_count,
    -- Bytes moved or set.
    sum(bytes) AS total_bytes,
    -- Summed duration, microseconds.
    sum(dur_ns) / 1e3 AS total_us,
    -- Bytes over summed duration, GB/s.
    CASE WHEN sum(dur_ns) > 0 THEN sum(bytes) / sum(dur_ns) END AS gbps,
    -- Median of the per-op bandwidth (bytes / duration), GB/s.
    median(CASE WHEN dur_ns > 0 THEN bytes / dur_ns END) AS p50_gbps,
    -- Highest per-op bandwidth, GB/s.
    max(CASE WHEN dur_ns > 0 THEN bytes / dur_ns END) AS max_gbps
FROM int_memory_ops
GROUP BY run, rank, phase, kind;
