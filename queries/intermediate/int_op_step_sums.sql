-- Every timed operation (int_op_steps) summed per trace file, profiler
-- step, kind and name: calls and total, self and longest duration. Computed
-- once per trace at ingest; hotspots and regressions add these up.
-- Grain: one row per trace file, step, kind and name.
-- requires: int_op_steps
-- materialize: per trace
CREATE OR REPLACE VIEW int_op_step_sums AS
SELECT
    run, rank, phase, file_id,
    -- Profiler step; NULL outside steps.
    step,
    -- kernel, cpu_op or annotation.
    kind,
    -- Kernel, op or annotation name.
    name,
    compare_name,
    -- Executions.
    count(*) AS calls,
    -- Summed duration, nanoseconds.
    CAST(sum(dur_ns) AS BIGINT) AS total_ns,
    -- Summed self time, nanoseconds.
    CAST(sum(self_ns) AS BIGINT) AS self_ns,
    -- Longest duration, nanoseconds.
    max(dur_ns) AS max_ns
FROM int_op_steps
GROUP BY run, rank, phase, file_id, step, kind, name, compare_name;
