-- Profiler steps as time ranges cut into equal buckets: how the step of
-- every CPU op, launch call and collective is found by an equality join.
-- A step's range runs from its start to its end or to the next step's
-- start, whichever comes first, so ranges never overlap (of steps that
-- start together, the lower number keeps the range). An event is in the
-- step whose range holds its start: join on bucket = ts_ns // width_ns,
-- then keep start_ns <= ts_ns < end_ns. The same answer as an ASOF join on
-- the step starts with the end checked, without sorting every event (a
-- 1 GiB trace's CPU ops: 0.1 s instead of 0.6). A trace's steps span
-- about 4,096 buckets, so the rows stay few whatever the steps' lengths.
-- Grain: one row per run, rank, phase, trace file, step and bucket.
-- requires: int_steps
CREATE OR REPLACE VIEW int_step_buckets AS
WITH ranges AS (
    SELECT
        run, rank, phase, file_id, step, ts_ns AS start_ns,
        CASE WHEN end_ns IS NULL OR next_ns IS NULL OR end_ns < next_ns THEN end_ns ELSE next_ns END AS end_ns
    FROM (
        SELECT *, lead(ts_ns) OVER (PARTITION BY file_id ORDER BY ts_ns, step DESC) AS next_ns
        FROM int_steps
    )
),
widths AS (
    -- (each end divided first: the span of times near both ends of int64 would overflow)
    SELECT file_id, greatest(1, max(end_ns) // 4096 - min(start_ns) // 4096) AS width_ns
    FROM ranges
    WHERE end_ns > start_ns
    GROUP BY file_id
)
SELECT
    r.run, r.rank, r.phase, r.file_id,
    -- Step number N of ProfilerStep#N.
    r.step,
    -- Start of the step's range, nanoseconds.
    r.start_ns,
    -- End of the step's range (exclusive): the step's end or the next step's start, nanoseconds.
    r.end_ns,
    -- Bucket width of this trace file, nanoseconds.
    w.width_ns,
    -- Bucket number: ts_ns // width_ns of the times in it.
    unnest(range(r.start_ns // w.width_ns, (r.end_ns - 1) // w.width_ns + 1)) AS bucket
FROM ranges r
JOIN widths w ON w.file_id = r.file_id
WHERE r.end_ns > r.start_ns;
