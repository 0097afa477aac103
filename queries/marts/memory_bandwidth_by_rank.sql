-- Memory traffic per rank and direction: copies (HtoD, DtoH, DtoD, PtoP)
-- and memsets, their bytes, their time on the GPU and the bandwidth reached
-- (bytes over summed duration; 1 byte/ns = 1 GB/s). HTA's
-- get_memory_bw_summary describes the bandwidth the trace reports per copy;
-- here the bandwidth is recomputed from bytes and durations, and copies of 0
-- ns count in the bytes but give no per-copy bandwidth (HTA rounds them up
-- to 1 us). `tracedb query memory_bandwidth --rank 0`
-- Grain: one row per run, rank, phase and kind.
-- requires: int_memory_bandwidth
-- order by: run, phase, rank, kind
CREATE OR REPLACE VIEW memory_bandwidth_by_rank AS
SELECT run, rank, phase, kind, op_count, total_bytes, total_us, gbps, p50_gbps, max_gbps
FROM int_memory_bandwidth
WHERE grain = 'rank';
