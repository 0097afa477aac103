-- Time per user annotation (record_function ranges: DualPipe's attn(F),
-- mlp(B), dispatch(F), combine(B), ProfilerStep#N, ...) over all ranks: calls,
-- CPU time, and the GPU time of the kernels launched inside it (by any thread
-- of the process while it ran; nested annotations included).
-- `tracedb query annotations --run v2`; per rank: annotations_by_rank.
-- Grain: one row per run, phase, annotation name.
-- requires: int_annotation_stats
-- order by: cpu_total_us DESC, name
CREATE OR REPLACE VIEW annotations AS
SELECT run, phase, name, rank_count, calls, cpu_total_us, cpu_avg_us, cpu_p50_us, cpu_max_us, cpu_self_us,
    kernel_count, gpu_kernel_us, gpu_kernel_avg_us
FROM int_annotation_stats
WHERE NOT is_per_rank;
