-- How busy each GPU stream and device is within one trace file: the exact
-- union of its activity's intervals (the islands of int_gpu_islands, summed),
-- with the span from first start to last end and the idle gaps. Computed
-- once per trace at ingest, so that gpu_utilization adds up a few rows per
-- trace instead of sorting every kernel of the warehouse.
-- Without numbering the islands: each interval adds what it reaches past
-- the running maximum of the ends before it (int_gpu_intervals), and one
-- that starts after that maximum opens an island, after a gap of the
-- difference.
-- Grain: one row per trace file, device, scope and stream.
-- requires: int_gpu_intervals
-- materialize: per trace
CREATE OR REPLACE VIEW int_gpu_busy_sums AS
SELECT
    run, rank, phase, file_id,
    -- GPU index.
    device,
    -- stream (one stream) or device (all its streams together).
    scope,
    -- Stream; NULL for scope device.
    stream,
    -- Time at least one kernel, copy or set runs (union), nanoseconds.
    CAST(sum(greatest(end_ns - greatest(ts_ns, coalesce(prev_end_ns, ts_ns)), 0)) AS BIGINT) AS busy_ns,
    -- First start to last end, nanoseconds.
    max(end_ns) - min(ts_ns) AS span_ns,
    -- Idle gaps between busy intervals.
    count(*) FILTER (WHERE ts_ns > prev_end_ns) AS gap_count,
    -- Longest idle gap, nanoseconds.
    max(ts_ns - prev_end_ns) FILTER (WHERE ts_ns > prev_end_ns) AS max_gap_ns,
    -- Kernels, copies and sets.
    count(*) AS activity_count
FROM int_gpu_intervals
GROUP BY run, rank, phase, file_id, device, scope, stream;
