-- Every timed operation: GPU kernels, CPU ops and CPU-side user annotations
-- (ProfilerStep#N among them), with the name regressions compares them
-- under. The base of int_op_steps and of the duration counts.
-- Grain: one row per kernel, CPU op or annotation.
-- requires: stg_kernels, stg_cpu_ops, stg_annotations
CREATE OR REPLACE VIEW int_timed_ops AS
SELECT
    run, rank, phase, file_id, event_id,
    -- kernel, cpu_op or annotation.
    'cpu_op' AS kind,
    -- Kernel, op or annotation name.
    name,
    -- The name regressions compares under: the name, but ProfilerStep#* for every ProfilerStep#N annotation.
    name AS compare_name,
    -- Start, nanoseconds.
    ts_ns,
    -- Duration, nanoseconds.
    dur_ns,
    -- Self time (kernels: the whole duration), nanoseconds.
    self_ns,
    -- Runtime correlation id (kernels; NULL otherwise).
    NULL::BIGINT AS correlation
FROM stg_cpu_ops
UNION ALL
SELECT run, rank, phase, file_id, event_id, 'annotation', name,
    regexp_replace(name, '^ProfilerStep#[0-9]+$', 'ProfilerStep#*'), ts_ns, dur_ns, self_ns, NULL
FROM stg_annotations
WHERE side = 'cpu'
UNION ALL
SELECT run, rank, phase, file_id, event_id, 'kernel', name, name, ts_ns, dur_ns, dur_ns, correlation
FROM stg_kernels;
