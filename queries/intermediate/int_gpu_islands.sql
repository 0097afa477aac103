-- Busy intervals of the GPU: overlapping activity merged into islands (exact
-- union of intervals, sort-based: a new island starts where an interval
-- starts after the running maximum of the ends before it). One set of islands
-- per scope: `stream` (all activity of one stream), `device` (all streams of
-- a device), and, over kernels only, `compute`, `comm` and `kernel` (compute
-- and comm together), each also per profiler step (by_step). Unions are taken
-- within one trace file and device. gpu_utilization reads it; overlap reads its sums per
-- trace (int_overlap_sums, computed at ingest).
-- Grain: one row per run, rank, phase, file, device, scope, stream, step and island.
-- requires: int_gpu_activity
CREATE OR REPLACE VIEW int_gpu_islands AS
WITH scopes AS (
    SELECT scope, by_step
    FROM (VALUES ('stream', false), ('device', false), ('compute', false), ('comm', false), ('kernel', false),
                 ('compute', true), ('comm', true), ('kernel', true)) AS t(scope, by_step)
),
intervals AS (
    -- each activity once per scope it belongs to (the activity is read once)
    SELECT
        a.run, a.rank, a.phase, a.file_id, a.device, s.scope, s.by_step,
        CASE WHEN s.scope = 'stream' THEN a.stream END AS stream,
        CASE WHEN s.by_step THEN a.step END AS step,
        a.ts_ns, a.end_ns
    FROM int_gpu_activity a
    JOIN scopes s
      ON s.scope IN ('stream', 'device')
      OR (a.activity IN ('compute', 'comm') AND s.scope IN (a.activity, 'kernel'))
),
marked AS (
    SELECT
        *,
        max(end_ns) OVER (
            PARTITION BY run, rank, phase, file_id, device, scope, by_step, stream, step
            ORDER BY ts_ns, end_ns ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
        ) AS prev_end_ns
    FROM intervals
),
numbered AS (
    SELECT
        *,
        sum(CASE WHEN prev_end_ns IS NULL OR ts_ns > prev_end_ns THEN 1 ELSE 0 END) OVER (
            PARTITION BY run, rank, phase, file_id, device, scope, by_step, stream, step
            ORDER BY ts_ns, end_ns ROWS UNBOUNDED PRECEDING
        ) AS island
    FROM marked
)
SELECT
    run, rank, phase, file_id,
    -- GPU index.
    device,
    -- stream, device, compute, comm or kernel (see above).
    scope,
    -- True: islands of one profiler step's kernels (by the launch's step).
    by_step,
    -- Stream (scope stream); NULL for the other scopes.
    stream,
    -- Profiler step (by_step); NULL otherwise or outside steps.
    step,
    -- Island number within its partition, from 1 in time order.
    island,
    -- Island start, nanoseconds.
    min(ts_ns) AS ts_ns,
    -- Island end, nanoseconds.
    max(end_ns) AS end_ns,
    -- Kernels, copies and sets merged into the island.
    count(*) AS activity_count
FROM numbered
GROUP BY run, rank, phase, file_id, device, scope, by_step, stream, step, island;
