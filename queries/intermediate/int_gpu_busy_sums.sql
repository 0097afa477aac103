-- How busy each GPU stream and device is within one trace file: the busy
-- islands (int_gpu_islands) summed, with the span from first start to last
-- end and the idle gaps. Computed once per trace at ingest, so that
-- gpu_utilization adds up a few rows per trace instead of sorting every
-- kernel of the warehouse.
-- Grain: one row per trace file, device, scope and stream.
-- requires: int_gpu_islands
-- materialize: per trace
CREATE OR REPLACE VIEW int_gpu_busy_sums AS
WITH islands AS (
    SELECT
        run, rank, phase, file_id, device, scope, stream, ts_ns, end_ns, activity_count,
        lead(ts_ns) OVER (
            PARTITION BY run, rank, phase, file_id, device, scope, stream ORDER BY island
        ) - end_ns AS gap_after_ns
    FROM int_gpu_islands
)
SELECT
    run, rank, phase, file_id,
    -- GPU index.
    device,
    -- stream (one stream) or device (all its streams together).
    scope,
    -- Stream; NULL for scope device.
    stream,
    -- Time at least one kernel, copy or set runs (union), nanoseconds.
    CAST(sum(end_ns - ts_ns) AS BIGINT) AS busy_ns,
    -- First start to last end, nanoseconds.
    max(end_ns) - min(ts_ns) AS span_ns,
    -- Idle gaps between busy intervals.
    count(*) - 1 AS gap_count,
    -- Longest idle gap, nanoseconds.
    max(gap_after_ns) AS max_gap_ns,
    -- Kernels, copies and sets.
    CAST(sum(activity_count) AS BIGINT) AS activity_count
FROM islands
GROUP BY run, rank, phase, file_id, device, scope, stream;
