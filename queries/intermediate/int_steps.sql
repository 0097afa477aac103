-- Profiler steps: the CPU-side ProfilerStep#N ranges torch.profiler writes
-- around each step (user annotations; CPU ops in older traces). Every other
-- event maps to a step through them (CPU events by their start, GPU events by
-- the start of their launch call).
-- Grain: one row per run, rank, phase, trace file and step.
-- requires: stg_annotations, stg_cpu_ops
CREATE OR REPLACE VIEW int_steps AS
SELECT
    run, rank, phase, file_id,
    -- Step number N of ProfilerStep#N.
    TRY_CAST(substr(name, 14) AS BIGINT) AS step,
    -- Annotation name (ProfilerStep#N).
    min(name) AS step_name,
    -- Step start, nanoseconds.
    min(ts_ns) AS ts_ns,
    -- Step end, nanoseconds.
    max(end_ns) AS end_ns,
    -- Step duration on the CPU (end - start), nanoseconds.
    max(end_ns) - min(ts_ns) AS dur_ns
FROM (
    SELECT run, rank, phase, file_id, name, ts_ns, end_ns FROM stg_annotations WHERE side = 'cpu'
    UNION ALL
    -- older PyTorch wrote the steps as CPU ops
    SELECT run, rank, phase, file_id, name, ts_ns, end_ns FROM stg_cpu_ops
)
WHERE name LIKE 'ProfilerStep#%' AND TRY_CAST(substr(name, 14) AS BIGINT) IS NOT NULL
GROUP BY run, rank, phase, file_id, TRY_CAST(substr(name, 14) AS BIGINT);
