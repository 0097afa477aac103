-- Everything that keeps a GPU stream busy, classified: compute kernels,
-- communication kernels (comm_patterns), memory copies and sets; with the
-- profiler step of the launch call.
-- Grain: one row per kernel, copy or memset.
-- requires: stg_kernels, stg_memcpy, int_comm_names, int_launch_steps
CREATE OR REPLACE VIEW int_gpu_activity AS
WITH activity AS (
    SELECT k.run, k.rank, k.phase, k.file_id, k.event_id, k.name, k.device, k.stream, k.ts_ns, k.end_ns, k.correlation,
           CASE WHEN n.name IS NULL THEN 'compute' ELSE 'comm' END AS activity
    FROM stg_kernels k
    LEFT JOIN int_comm_names n ON n.source = 'kernel' AND n.name = k.name
    UNION ALL
    SELECT run, rank, phase, file_id, event_id, name, device, stream, ts_ns, end_ns, correlation, kind AS activity
    FROM stg_memcpy
)
SELECT
    a.run, a.rank, a.phase, a.file_id, a.event_id,
    -- compute (kernel), comm (communication kernel), memcpy or memset.
    a.activity,
    -- Kernel or copy name.
    a.name,
    -- GPU index.
    a.device,
    -- Stream.
    a.stream,
    -- Start, nanoseconds.
    a.ts_ns,
    -- End, nanoseconds.
    a.end_ns,
    -- Profiler step of the launch call; NULL outside steps or without one.
    l.step
FROM activity a
LEFT JOIN int_launch_steps l
    ON l.file_id = a.file_id
   AND l.correlation = a.correlation;
