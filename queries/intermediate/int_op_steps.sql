-- Every timed operation (GPU kernels, CPU ops, CPU user annotations) with the
-- profiler step it belongs to: CPU events by their start, kernels by their
-- launch call's. The base of hotspots and regressions (their per-trace sums).
-- Grain: one row per kernel, CPU op or annotation.
-- requires: int_timed_ops, int_launch_steps, int_step_buckets
CREATE OR REPLACE VIEW int_op_steps AS
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
    s.step,
    -- The name regressions compares under: the name, but ProfilerStep#* for every ProfilerStep#N annotation.
    c.compare_name
FROM int_timed_ops c
LEFT JOIN (SELECT DISTINCT file_id, width_ns FROM int_step_buckets) w
    ON w.file_id = c.file_id
LEFT JOIN int_step_buckets s
    ON s.file_id = c.file_id
   AND s.bucket = c.ts_ns // w.width_ns AND c.ts_ns >= s.start_ns AND c.ts_ns < s.end_ns
WHERE c.kind <> 'kernel'
UNION ALL
-- Kernels by the step of their launch call alone: the CPU op behind a launch
-- (int_kernel_launches) is not needed here, and joining it costs memory.
SELECT k.run, k.rank, k.phase, k.file_id, k.event_id, k.kind, k.name, k.ts_ns, k.dur_ns,
    k.self_ns, l.step, k.compare_name
FROM int_timed_ops k
LEFT JOIN int_launch_steps l
    ON l.file_id = k.file_id
   AND l.correlation = k.correlation
WHERE k.kind = 'kernel';
