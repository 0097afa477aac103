-- Every timed operation that hotspots ranks, in one shape: GPU kernels,
-- CPU ops and user annotations. One row per execution.
-- requires: stg_kernels, stg_cpu_ops, stg_annotations
CREATE OR REPLACE VIEW int_op_durations AS
SELECT
    run, rank, phase,
    -- kernel, cpu_op or annotation.
    'kernel' AS kind,
    -- Kernel, op or annotation name.
    name,
    -- Duration, nanoseconds.
    dur_ns,
    -- Self time, nanoseconds (a kernel's whole duration).
    dur_ns AS self_ns
FROM stg_kernels
UNION ALL
SELECT run, rank, phase, 'cpu_op' AS kind, name, dur_ns, self_ns FROM stg_cpu_ops
UNION ALL
SELECT run, rank, phase, 'annotation' AS kind, name, dur_ns, self_ns FROM stg_annotations WHERE side = 'cpu';
