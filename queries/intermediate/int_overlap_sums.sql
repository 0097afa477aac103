-- Per trace file: the union of compute kernels, of communication kernels,
-- and of both together, per device summed, whole trace and per profiler
-- step. Kernels in start order, each adds the part of it past the latest
-- end before it (the union of intervals, exactly; the same unions as
-- int_gpu_islands, without building the islands). Two sorts, per device and
-- per device and step: in each, the latest end of the compute kernels, of
-- the communication kernels and of both are three running maxima
-- (three times faster than one sort of each kernel in each of its scopes).
-- Computed once per trace at ingest; int_overlap adds the files of a run,
-- rank and phase together.
-- Grain: one row per trace file, is_per_step and step.
-- requires: int_gpu_activity
-- materialize: per trace
CREATE OR REPLACE VIEW int_overlap_sums AS
WITH kernels AS (
    SELECT run, rank, phase, file_id, device, activity, step, ts_ns, end_ns
    FROM int_gpu_activity
    WHERE activity IN ('compute', 'comm')
),
marked AS (
    -- the latest end among the kernels before each one, of its own kind
    -- (compute or comm) and of both, in the whole trace and in its step
    SELECT
        *,
        CASE activity
            WHEN 'compute' THEN max(CASE WHEN activity = 'compute' THEN end_ns END) OVER whole
            ELSE max(CASE WHEN activity = 'comm' THEN end_ns END) OVER whole
        END AS prev_own_ns,
        max(end_ns) OVER whole AS prev_kernel_ns,
        CASE activity
            WHEN 'compute' THEN max(CASE WHEN activity = 'compute' THEN end_ns END) OVER per_step
            ELSE max(CASE WHEN activity = 'comm' THEN end_ns END) OVER per_step
        END AS prev_own_step_ns,
        max(end_ns) OVER per_step AS prev_kernel_step_ns
    FROM kernels
    WINDOW
        whole AS (PARTITION BY file_id, device ORDER BY ts_ns, end_ns
                  ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
        per_step AS (PARTITION BY file_id, device, step ORDER BY ts_ns, end_ns
                     ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
),
added AS (
    -- what each kernel adds to each union
    SELECT
        run, rank, phase, file_id, activity, step,
        greatest(0, end_ns - greatest(ts_ns, coalesce(prev_own_ns, ts_ns))) AS own_ns,
        greatest(0, end_ns - greatest(ts_ns, coalesce(prev_kernel_ns, ts_ns))) AS kernel_ns,
        greatest(0, end_ns - greatest(ts_ns, coalesce(prev_own_step_ns, ts_ns))) AS own_step_ns,
        greatest(0, end_ns - greatest(ts_ns, coalesce(prev_kernel_step_ns, ts_ns))) AS kernel_step_ns
    FROM marked
),
sums AS (
    SELECT
        run, rank, phase, file_id, false AS is_per_step, NULL::BIGINT AS step,
        sum(own_ns) FILTER (WHERE activity = 'compute') AS compute_ns,
        sum(own_ns) FILTER (WHERE activity = 'comm') AS comm_ns,
        sum(kernel_ns) AS kernel_ns,
        count(*) FILTER (WHERE activity = 'compute') AS compute_kernel_count,
        count(*) FILTER (WHERE activity = 'comm') AS comm_kernel_count
    FROM added
    GROUP BY run, rank, phase, file_id
    UNION ALL
    SELECT
        run, rank, phase, file_id, true, step,
        sum(own_step_ns) FILTER (WHERE activity = 'compute'),
        sum(own_step_ns) FILTER (WHERE activity = 'comm'),
        sum(kernel_step_ns),
        count(*) FILTER (WHERE activity = 'compute'),
        count(*) FILTER (WHERE activity = 'comm')
    FROM added
    GROUP BY run, rank, phase, file_id, step
)
SELECT
    run, rank, phase, file_id,
    -- True: per profiler step (kernels by the step of their launch call).
    is_per_step,
    -- Profiler step when is_per_step; NULL otherwise, or for kernels launched outside steps.
    step,
    -- Union of compute kernels, nanoseconds.
    CAST(coalesce(compute_ns, 0) AS BIGINT) AS compute_ns,
    -- Union of communication kernels, nanoseconds.
    CAST(coalesce(comm_ns, 0) AS BIGINT) AS comm_ns,
    -- Union of all kernels, nanoseconds.
    CAST(coalesce(kernel_ns, 0) AS BIGINT) AS kernel_ns,
    -- Compute kernels.
    compute_kernel_count,
    -- Communication kernels.
    comm_kernel_count
FROM sums;
