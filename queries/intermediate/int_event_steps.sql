-- The profiler step of every CPU-side slice that starts inside one: CPU ops,
-- CPU user annotations and runtime/driver calls, each in the step whose
-- range (int_step_buckets) holds its start. int_op_steps, int_launch_calls
-- and int_comm_ops join their own rows to the buckets the same way instead
-- of joining this on the event: over one trace, this table of every slice
-- and three hash joins to it cost about twice the three bucket joins.
-- Slices outside every step have no row (join it LEFT).
-- Grain: one row per CPU op, CPU annotation or runtime call inside a step.
-- requires: stg_cpu_ops, stg_annotations, stg_runtime_calls, int_step_buckets
CREATE OR REPLACE VIEW int_event_steps AS
WITH slices AS (
    SELECT file_id, event_id, ts_ns FROM stg_cpu_ops
    UNION ALL
    SELECT file_id, event_id, ts_ns FROM stg_annotations WHERE side = 'cpu'
    UNION ALL
    SELECT file_id, event_id, ts_ns FROM stg_runtime_calls
)
SELECT
    s.run, s.rank, s.phase, e.file_id,
    -- Event id of the slice.
    e.event_id,
    -- Profiler step whose ProfilerStep#N range holds the slice's start.
    s.step
FROM slices e
JOIN (SELECT DISTINCT file_id, width_ns FROM int_step_buckets) w
    ON w.file_id = e.file_id
JOIN int_step_buckets s
    ON s.file_id = e.file_id
   AND s.bucket = e.ts_ns // w.width_ns AND e.ts_ns >= s.start_ns AND e.ts_ns < s.end_ns;
