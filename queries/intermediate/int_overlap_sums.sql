-- Per trace file: the summed kernel islands of each scope (compute, comm, and
-- both together), whole trace and per profiler step. Computed once per trace
-- at ingest; int_overlap adds the files of a run, rank and phase together.
-- Grain: one row per trace file, by_step and step.
-- requires: int_gpu_islands
-- materialize: per trace
CREATE OR REPLACE VIEW int_overlap_sums AS
SELECT
    run, rank, phase, file_id,
    -- True: per profiler step (kernels by the step of their launch call).
    by_step,
    -- Profiler step when by_step; NULL otherwise, or for kernels launched outside steps.
    step,
    -- Union of compute kernels, nanoseconds.
    CAST(coalesce(sum(end_ns - ts_ns) FILTER (WHERE scope = 'compute'), 0) AS BIGINT) AS compute_ns,
    -- Union of communication kernels, nanoseconds.
    CAST(coalesce(sum(end_ns - ts_ns) FILTER (WHERE scope = 'comm'), 0) AS BIGINT) AS comm_ns,
    -- Union of all kernels, nanoseconds.
    CAST(coalesce(sum(end_ns - ts_ns) FILTER (WHERE scope = 'kernel'), 0) AS BIGINT) AS kernel_ns,
    -- Compute kernels.
    CAST(coalesce(sum(activity_count) FILTER (WHERE scope = 'compute'), 0) AS BIGINT) AS compute_kernel_count,
    -- Communication kernels.
    CAST(coalesce(sum(activity_count) FILTER (WHERE scope = 'comm'), 0) AS BIGINT) AS comm_kernel_count
FROM int_gpu_islands
WHERE scope IN ('compute', 'comm', 'kernel')
GROUP BY run, rank, phase, file_id, by_step, step;
