-- Each kernel, copy and set of int_gpu_activity once per scope, `stream`
-- (all activity of one stream) and `device` (all streams of a device), with
-- the running maximum of the ends before it in time order within its trace
-- file: the one sort that int_gpu_islands and int_gpu_busy_sums take the
-- union of the intervals from (an interval that starts after that maximum
-- opens an island).
-- Grain: one row per kernel, copy or set and scope.
-- requires: int_gpu_activity
CREATE OR REPLACE VIEW int_gpu_intervals AS
WITH intervals AS (
    -- each activity once per scope (the activity is read once)
    SELECT
        a.run, a.rank, a.phase, a.file_id, a.device, s.scope,
        CASE WHEN s.scope = 'stream' THEN a.stream END AS stream,
        a.ts_ns, a.end_ns
    FROM int_gpu_activity a
    CROSS JOIN (VALUES ('stream'), ('device')) AS s(scope)
),
marked AS (
    SELECT
        *,
        max(end_ns) OVER (
            PARTITION BY file_id, device, scope, stream
            ORDER BY ts_ns, end_ns ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
        ) AS prev_end_ns
    FROM intervals
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
FROM marked;
