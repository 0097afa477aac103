-- Memory traffic per direction over all ranks: copies (HtoD, DtoH, DtoD,
-- PtoP) and memsets, bytes, time on the GPU and bandwidth (bytes over summed
-- duration; 1 byte/ns = 1 GB/s); per rank: memory_bandwidth_by_rank; over
-- time: memory_bandwidth_series. `tracedb query memory_bandwidth --run v2`
-- Grain: one row per run, phase and kind.
-- requires: int_memory_ops
-- order by: run, phase, kind
CREATE OR REPLACE VIEW memory_bandwidth AS
SELECT
    run, phase,
    -- HtoD, DtoH, DtoD, PtoP or memset.
    kind,
    -- Ranks with such operations.
    count(DISTINCT rank) AS rank_count,
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
GROUP BY run, phase, kind;
