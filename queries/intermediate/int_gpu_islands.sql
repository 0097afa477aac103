-- Busy intervals of the GPU: overlapping activity merged into islands (exact
-- union of intervals, sort-based: a new island starts where an interval
-- starts after the running maximum of the ends before it, int_gpu_intervals).
-- One set of islands per scope: `stream` (all activity of one stream) and
-- `device` (all streams of a device), within one trace file.
-- int_gpu_busy_sums sums the same islands per trace without numbering them;
-- int_overlap_sums takes the kernel unions the same way.
-- Grain: one row per run, rank, phase, file, device, scope, stream and island.
-- requires: int_gpu_intervals
CREATE OR REPLACE VIEW int_gpu_islands AS
WITH numbered AS (
    SELECT
        *,
        sum(CASE WHEN prev_end_ns IS NULL OR ts_ns > prev_end_ns THEN 1 ELSE 0 END) OVER (
            PARTITION BY file_id, device, scope, stream
            ORDER BY ts_ns, end_ns ROWS UNBOUNDED PRECEDING
        ) AS island
    FROM int_gpu_intervals
)
SELECT
    run, rank, phase, file_id,
    -- GPU index.
    device,
    -- stream or device (see above).
    scope,
    -- Stream (scope stream); NULL for scope device.
    stream,
    -- Island number within its partition, from 1 in time order.
    island,
    -- Island start, nanoseconds.
    min(ts_ns) AS ts_ns,
    -- Island end, nanoseconds.
    max(end_ns) AS end_ns,
    -- Kernels, copies and sets merged into the island.
    count(*) AS activity_count
FROM numbered
GROUP BY run, rank, phase, file_id, device, scope, stream, island;
