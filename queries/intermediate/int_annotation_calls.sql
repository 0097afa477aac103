-- Each CPU user annotation call with the GPU kernels launched inside it:
-- kernels whose launch call the same process made between the annotation's
-- start (inclusive) and end, on any thread (backward kernels are launched by
-- the autograd thread while the annotating thread waits). Nested annotations
-- each count them. Exact and join-free: running totals of the kernels per
-- launching process, read at the annotation's end and start (ASOF).
-- Grain: one row per annotation call.
-- requires: stg_annotations, int_kernel_launches
CREATE OR REPLACE VIEW int_annotation_calls AS
WITH launches AS (
    SELECT run, rank, phase, file_id, launch_pid AS pid, launch_ts_ns AS ts_ns,
           count(*) AS kernels, sum(dur_ns) AS kernel_ns
    FROM int_kernel_launches
    WHERE launch_ts_ns IS NOT NULL
    GROUP BY run, rank, phase, file_id, launch_pid, launch_ts_ns
),
running AS (
    SELECT
        run, rank, phase, file_id, pid, ts_ns,
        sum(kernels) OVER w AS cum_kernels,
        sum(kernel_ns) OVER w AS cum_kernel_ns
    FROM launches
    WINDOW w AS (PARTITION BY file_id, pid ORDER BY ts_ns ROWS UNBOUNDED PRECEDING)
),
calls AS (
    SELECT run, rank, phase, file_id, event_id, name, ts_ns, dur_ns, self_ns, end_ns, pid, tid
    FROM stg_annotations
    WHERE side = 'cpu'
)
SELECT
    a.run, a.rank, a.phase, a.file_id, a.event_id,
    -- Annotation name.
    a.name,
    -- Start, nanoseconds.
    a.ts_ns,
    -- Duration on the CPU, nanoseconds.
    a.dur_ns,
    -- Self time on the CPU (less child slices on the thread), nanoseconds.
    a.self_ns,
    -- Thread.
    a.tid,
    -- Kernels launched inside the annotation.
    CAST(coalesce(e.cum_kernels, 0) - coalesce(b.cum_kernels, 0) AS BIGINT) AS kernel_count,
    -- Summed duration of those kernels on the GPU, nanoseconds.
    CAST(coalesce(e.cum_kernel_ns, 0) - coalesce(b.cum_kernel_ns, 0) AS BIGINT) AS kernel_ns
FROM calls a
ASOF LEFT JOIN running e
    ON e.file_id = a.file_id
   AND e.pid = a.pid AND a.end_ns > e.ts_ns
ASOF LEFT JOIN running b
    ON b.file_id = a.file_id
   AND b.pid = a.pid AND a.ts_ns > b.ts_ns;
