-- Memory traffic per direction, per rank (grain 'rank') and over all ranks
-- (grain 'all', rank NULL): what memory_bandwidth and
-- memory_bandwidth_by_rank show.
-- Grain: one row per grain, run, rank, phase and kind.
-- requires: int_memory_ops
CREATE OR REPLACE VIEW int_memory_bandwidth AS
SELECT
    -- rank (one rank) or all (summed over ranks).
    CASE WHEN grouping(rank) = 1 THEN 'all' ELSE 'rank' END AS grain,
    run, rank, phase,
    -- HtoD, DtoH, DtoD, PtoP or memset.
    kind,
    -- Ranks with such operations.
    count(DISTINCT rank) AS rank_count,
    -- Copies or memsets.
    count(*) AS op_count,
    -- Bytes moved or set.
    CAST(sum(bytes) AS BIGINT) AS total_bytes,
    -- Summed duration, microseconds.
    sum(dur_ns) / 1e3 AS total_us,
    -- Bytes over summed duration, GB/s.
    CASE WHEN sum(dur_ns) > 0 THEN sum(bytes) / sum(dur_ns) END AS gbps,
    -- Median of the per-op bandwidth (bytes / duration), GB/s.
    median(CASE WHEN dur_ns > 0 THEN bytes / dur_ns END) AS p50_gbps,
    -- Highest per-op bandwidth, GB/s.
    max(CASE WHEN dur_ns > 0 THEN bytes / dur_ns END) AS max_gbps
FROM int_memory_ops
GROUP BY GROUPING SETS ((run, rank, phase, kind), (run, phase, kind));
