-- Every timed operation (GPU kernels, CPU ops, CPU user annotations) with the
-- profiler step it belongs to: CPU events by their start, kernels by their
-- launch call's. The base of hotspots and regressions (their per-trace sums).
-- Grain: one row per kernel, CPU op or annotation.
-- requires: int_kernel_launches, stg_cpu_ops, stg_annotations, int_steps
CREATE OR REPLACE VIEW int_op_steps AS
WITH cpu AS (
    SELECT run, rank, phase, file_id, event_id, 'cpu_op' AS kind, name, name AS compare_name, ts_ns, dur_ns, self_ns
    FROM stg_cpu_ops
    UNION ALL
    SELECT run, rank, phase, file_id, event_id, 'annotation' AS kind, name,
        regexp_replace(name, '^ProfilerStep#[0-9]+$', 'ProfilerStep#*') AS compare_name, ts_ns, dur_ns, self_ns
    FROM stg_annotations
    WHERE side = 'cpu'
)
SELECT
    c.run, c.rank, c.phase, c.file_id, c.event_id,
    -- kernel, cpu_op or annotation.
    c.kind,
    -- Kernel, op or annotation name.
    c.name,
    -- Start, nanoseconds.
    c.ts_ns,
    -- Duration, nanoseconds.
    c.dur_ns,
    -- Self time (kernels: the whole duration), nanoseconds.
    c.self_ns,
    -- Profiler step; NULL outside steps.
    CASE WHEN c.ts_ns < s.end_ns THEN s.step END AS step,
    -- The name regressions compares under: the name, but ProfilerStep#* for every ProfilerStep#N annotation.
    c.compare_name
FROM cpu c
ASOF LEFT JOIN int_steps s
    ON s.run = c.run AND s.rank = c.rank AND s.phase = c.phase AND s.file_id = c.file_id AND c.ts_ns >= s.ts_ns
UNION ALL
SELECT run, rank, phase, file_id, event_id, 'kernel' AS kind, name, ts_ns, dur_ns, dur_ns AS self_ns, step,
    name AS compare_name
FROM int_kernel_launches;
