-- Each kernel, copy and set of int_gpu_activity once per scope, `stream`
-- (all activity of one stream) and `device` (all streams of a device), with
-- the running maximum of the ends before it in time order within its trace
-- file: the sorts that int_gpu_islands and int_gpu_busy_sums take the
-- union of the intervals from (an interval that starts after that maximum
-- opens an island). Both maxima come from one read of the activity, one
-- sort per scope, then each row is given once per scope.
-- Grain: one row per kernel, copy or set and scope.
-- requires: int_gpu_activity
CREATE OR REPLACE VIEW int_gpu_intervals AS
WITH marked AS (
    SELECT
        run, rank, phase, file_id, device, stream, ts_ns, end_ns,
        max(end_ns) OVER (
            PARTITION BY file_id, device, stream
            ORDER BY ts_ns, end_ns ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
        ) AS prev_stream_end_ns,
        max(end_ns) OVER (
            PARTITION BY file_id, device
            ORDER BY ts_ns, end_ns ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
        ) AS prev_device_end_ns
    FROM int_gpu_activity
),
intervals AS (
    SELECT run, rank, phase, file_id, device, 'stream' AS scope, stream, ts_ns, end_ns,
           prev_stream_end_ns AS prev_end_ns
    FROM marked
    UNION ALL
    SELECT run, rank, phase, file_id, device, 'device' AS scope, NULL AS stream, ts_ns, end_ns,
           prev_device_end_ns AS prev_end_ns
    FROM marked
)
SELECT
    run, rank, phase, file_id,
    -- GPU index.
    device,
    -- stream or device (see above).
    scope,
    -- Stream (scope stream); NULL for scope device.
    stream,
    -- Start, nanoseconds.
    ts_ns,
    -- End, nanoseconds.
    end_ns,
    -- Latest end of the intervals before this one in (ts_ns, end_ns) order; NULL for the first.
    prev_end_ns
FROM intervals;
