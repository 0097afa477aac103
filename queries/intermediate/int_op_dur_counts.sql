-- How many times each duration occurs, per trace file, kind and name of
-- timed operation (int_timed_ops): the exact distribution that percentiles
-- are read from (int_op_percentiles) without rescanning the events.
-- Computed once per trace at ingest; no step needed, so no join.
-- Grain: one row per trace file, kind, name and distinct duration.
-- requires: int_timed_ops
-- materialize: per trace
CREATE OR REPLACE VIEW int_op_dur_counts AS
SELECT
    run, rank, phase, file_id,
    -- kernel, cpu_op or annotation.
    kind,
    -- Kernel, op or annotation name.
    name,
    compare_name,
    -- Duration, nanoseconds.
    dur_ns,
    -- Executions that took exactly dur_ns.
    count(*) AS calls
FROM int_timed_ops
GROUP BY run, rank, phase, file_id, kind, name, compare_name, dur_ns;
