-- Memory traffic per direction over all ranks: copies (HtoD, DtoH, DtoD,
-- PtoP) and memsets, bytes, time on the GPU and bandwidth (bytes over summed
-- duration; 1 byte/ns = 1 GB/s); per rank: memory_bandwidth_by_rank (which
-- says how this differs from HTA); over time: memory_bandwidth_series.
-- `tracedb query memory_bandwidth --run v2`
-- Grain: one row per run, phase and kind.
-- requires: int_memory_bandwidth
-- order by: run, phase, kind
CREATE OR REPLACE VIEW memory_bandwidth AS
SELECT run, phase, kind, rank_count, op_count, total_bytes, total_us, gbps, p50_gbps, max_gbps
FROM int_memory_bandwidth
WHERE grain = 'all';
