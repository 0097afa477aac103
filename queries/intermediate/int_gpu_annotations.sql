-- Time on the GPU of each user annotation name, beside its CPU time, per
-- rank (grain 'rank') and over all ranks (grain 'all', rank NULL). Where a
-- trace file has GPU-side annotations of the name (gpu_user_annotation,
-- which Kineto draws over the kernels an annotation launched), the GPU time
-- is the union of those; else the union of the kernels, copies and sets
-- whose launch call the same process made inside one of the name's CPU
-- ranges. Unions are per trace file and name (nested or repeated ranges of
-- one name count once), then summed.
-- Grain: one row per grain, run, rank, phase and annotation name.
-- requires: stg_annotations, int_stream_ops
CREATE OR REPLACE VIEW int_gpu_annotations AS
WITH cpu AS (
    SELECT run, rank, phase, file_id, name, pid, ts_ns, end_ns, dur_ns
    FROM stg_annotations
    WHERE side = 'cpu'
),
gpu AS (
    SELECT run, rank, phase, file_id, name, ts_ns, end_ns FROM stg_annotations WHERE side = 'gpu'
),
intervals AS (
    SELECT run, rank, phase, file_id, name, ts_ns, end_ns, 'gpu_annotation' AS source FROM gpu
    UNION ALL
    SELECT DISTINCT c.run, c.rank, c.phase, c.file_id, c.name, o.ts_ns, o.end_ns, 'kernels' AS source
    FROM cpu c
    JOIN int_stream_ops o
      ON o.run = c.run AND o.rank = c.rank AND o.phase = c.phase AND o.file_id = c.file_id
     AND o.launch_pid = c.pid AND o.launch_ts_ns >= c.ts_ns AND o.launch_ts_ns < c.end_ns
    LEFT JOIN (SELECT DISTINCT run, rank, phase, file_id, name FROM gpu) g
      ON g.run = c.run AND g.rank = c.rank AND g.phase = c.phase AND g.file_id = c.file_id AND g.name = c.name
    WHERE g.name IS NULL
),
marked AS (
    SELECT *, max(end_ns) OVER (PARTITION BY run, rank, phase, file_id, name ORDER BY ts_ns, end_ns
                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end_ns
    FROM intervals
),
gpu_time AS (
    SELECT run, rank, phase, file_id, name, min(source) AS source, count(*) AS interval_count,
           sum(greatest(end_ns - greatest(ts_ns, coalesce(prev_end_ns, ts_ns)), 0)) AS gpu_ns
    FROM marked
    GROUP BY run, rank, phase, file_id, name
),
per_file AS (
    SELECT c.run, c.rank, c.phase, c.file_id, c.name, count(*) AS calls, sum(c.dur_ns) AS cpu_ns
    FROM cpu c
    GROUP BY c.run, c.rank, c.phase, c.file_id, c.name
)
SELECT
    -- rank (one rank) or all (summed over ranks).
    CASE WHEN grouping(f.rank) = 1 THEN 'all' ELSE 'rank' END AS grain,
    f.run, f.rank, f.phase,
    -- Annotation name.
    f.name,
    -- CPU ranges of the name.
    sum(f.calls) AS calls,
    -- Summed CPU duration of its ranges, microseconds.
    sum(f.cpu_ns) / 1e3 AS cpu_us,
    -- Time on the GPU (see above), microseconds.
    coalesce(sum(g.gpu_ns), 0) / 1e3 AS gpu_us,
    -- gpu_annotation, kernels, mixed (traces differ) or NULL (nothing ran on the GPU).
    CASE WHEN count(DISTINCT g.source) > 1 THEN 'mixed' ELSE min(g.source) END AS gpu_source,
    -- GPU annotation ranges or GPU operations in the union.
    coalesce(sum(g.interval_count), 0) AS gpu_interval_count
FROM per_file f
LEFT JOIN gpu_time g
    ON g.run = f.run AND g.rank = f.rank AND g.phase = f.phase AND g.file_id = f.file_id AND g.name = f.name
GROUP BY GROUPING SETS ((f.run, f.rank, f.phase, f.name), (f.run, f.phase, f.name));
