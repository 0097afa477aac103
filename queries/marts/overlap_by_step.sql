-- overlap per profiler step: compute and communication kernel unions, their
-- intersection and the share of communication hidden, with kernels taken by
-- the step of their launch call (kernels launched outside steps: step NULL).
-- Grain: one row per run, rank, phase, step.
-- requires: int_overlap
-- order by: run, phase, rank, step
CREATE OR REPLACE VIEW overlap_by_step AS
SELECT run, rank, phase, step, compute_us, comm_us, overlap_us, exposed_comm_us, comm_hidden_pct, kernel_busy_us,
    compute_kernel_count, comm_kernel_count
FROM int_overlap
WHERE is_per_step;
