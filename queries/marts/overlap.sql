-- How much communication hides behind compute, per rank: the union of
-- compute kernels, the union of communication kernels (comm_patterns: NCCL,
-- DeepEP, ...), their intersection, and the share of communication time
-- overlapped by compute (comm_hidden_pct = 100 x overlap / comm). Unions are
-- exact, per trace file and device. `tracedb query overlap --run v2`; per
-- step: overlap_by_step.
-- Grain: one row per run, rank, phase.
-- requires: int_overlap
-- order by: run, phase, rank
CREATE OR REPLACE VIEW overlap AS
SELECT run, rank, phase, compute_us, comm_us, overlap_us, exposed_comm_us, comm_hidden_pct, kernel_busy_us,
    compute_kernel_count, comm_kernel_count
FROM int_overlap
WHERE NOT is_per_step;
