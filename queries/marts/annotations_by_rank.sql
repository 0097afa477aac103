-- annotations per rank: calls, CPU time and the GPU time of the kernels
-- launched inside each user annotation (`tracedb query annotations --rank N`).
-- Grain: one row per run, rank, phase, annotation name.
-- requires: int_annotation_stats
-- order by: cpu_total_us DESC, name
CREATE OR REPLACE VIEW annotations_by_rank AS
SELECT run, rank, phase, name, calls, cpu_total_us, cpu_avg_us, cpu_p50_us, cpu_max_us, cpu_self_us,
    kernel_count, gpu_kernel_us, gpu_kernel_avg_us
FROM int_annotation_stats
WHERE is_per_rank;
