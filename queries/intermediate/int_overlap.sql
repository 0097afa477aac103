-- Compute / communication overlap from the kernel islands (int_overlap_sums): the union of
-- compute kernels, of communication kernels, and of both, per trace file and
-- device, summed. Overlap = compute + comm - union of both (exact). overlap
-- and overlap_by_step show it.
-- Grain: one row per run, rank, phase, is_per_step and step (step NULL when not is_per_step).
-- requires: int_overlap_sums
CREATE OR REPLACE VIEW int_overlap AS
WITH sums AS (
    SELECT
        run, rank, phase, is_per_step, step,
        sum(compute_ns) AS compute_ns,
        sum(comm_ns) AS comm_ns,
        sum(kernel_ns) AS kernel_ns,
        sum(compute_kernel_count) AS compute_kernel_count,
        sum(comm_kernel_count) AS comm_kernel_count
    FROM int_overlap_sums
    GROUP BY run, rank, phase, is_per_step, step
)
SELECT
    run, rank, phase,
    -- True: per profiler step (kernels by the step of their launch call).
    is_per_step,
    -- Profiler step (ProfilerStep#N) when is_per_step; NULL otherwise, or for kernels launched outside steps.
    step,
    -- Union of compute kernels (every kernel comm_patterns does not match), microseconds.
    compute_ns / 1e3 AS compute_us,
    -- Union of communication kernels, microseconds.
    comm_ns / 1e3 AS comm_us,
    -- Time compute and communication kernels both run, microseconds.
    (compute_ns + comm_ns - kernel_ns) / 1e3 AS overlap_us,
    -- Communication not hidden by compute, microseconds.
    (kernel_ns - compute_ns) / 1e3 AS exposed_comm_us,
    -- Share of communication time overlapped by compute: 100 x overlap / comm, percent; NULL without communication.
    CASE WHEN comm_ns > 0 THEN 100.0 * (compute_ns + comm_ns - kernel_ns) / comm_ns END AS comm_hidden_pct,
    -- Union of all kernels, microseconds.
    kernel_ns / 1e3 AS kernel_busy_us,
    -- Compute kernels.
    CAST(compute_kernel_count AS BIGINT) AS compute_kernel_count,
    -- Communication kernels.
    CAST(comm_kernel_count AS BIGINT) AS comm_kernel_count
FROM sums;
