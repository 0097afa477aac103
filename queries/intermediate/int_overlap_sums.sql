-- Per trace file: the union of compute kernels, of communication kernels,
-- and of both together, per device summed, whole trace and per profiler
-- step. One sort: kernels in start order, each adds the part of it past the
-- latest end before it (the union of intervals, exactly; the same unions as
-- int_gpu_islands, without building the islands). Computed once per trace
-- at ingest; int_overlap adds the files of a run, rank and phase together.
-- Grain: one row per trace file, is_per_step and step.
-- requires: int_gpu_activity
-- materialize: per trace
CREATE OR REPLACE VIEW int_overlap_sums AS
WITH scopes AS (
    SELECT scope, is_per_step
    FROM (VALUES ('compute', false), ('comm', false), ('kernel', false),
                 ('compute', true), ('comm', true), ('kernel', true)) AS t(scope, is_per_step)
),
intervals AS (
    -- each kernel in its own scope (compute or comm) and in kernel (both)
    SELECT
        a.run, a.rank, a.phase, a.file_id, a.device, s.scope, s.is_per_step,
        CASE WHEN s.is_per_step THEN a.step END AS step,
        a.ts_ns, a.end_ns
    FROM int_gpu_activity a
    JOIN scopes s ON a.activity IN ('compute', 'comm') AND s.scope IN (a.activity, 'kernel')
),
marked AS (
    SELECT
        *,
        max(end_ns) OVER (
            PARTITION BY file_id, device, scope, is_per_step, step
            ORDER BY ts_ns, end_ns ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
        ) AS prev_end_ns
    FROM intervals
),
added AS (
    SELECT *, greatest(0, end_ns - greatest(ts_ns, coalesce(prev_end_ns, ts_ns))) AS new_ns
    FROM marked
)
SELECT
    run, rank, phase, file_id,
    -- True: per profiler step (kernels by the step of their launch call).
    is_per_step,
    -- Profiler step when is_per_step; NULL otherwise, or for kernels launched outside steps.
    step,
    -- Union of compute kernels, nanoseconds.
    CAST(coalesce(sum(new_ns) FILTER (WHERE scope = 'compute'), 0) AS BIGINT) AS compute_ns,
    -- Union of communication kernels, nanoseconds.
    CAST(coalesce(sum(new_ns) FILTER (WHERE scope = 'comm'), 0) AS BIGINT) AS comm_ns,
    -- Union of all kernels, nanoseconds.
    CAST(coalesce(sum(new_ns) FILTER (WHERE scope = 'kernel'), 0) AS BIGINT) AS kernel_ns,
    -- Compute kernels.
    count(*) FILTER (WHERE scope = 'compute') AS compute_kernel_count,
    -- Communication kernels.
    count(*) FILTER (WHERE scope = 'comm') AS comm_kernel_count
FROM added
GROUP BY run, rank, phase, file_id, is_per_step, step;
