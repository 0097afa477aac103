-- Time on the GPU per user annotation and rank, beside its CPU time
-- (gpu_annotations says how). `tracedb query gpu_annotations --rank 0`
-- Grain: one row per run, rank, phase and annotation name.
-- requires: int_gpu_annotations
-- order by: gpu_us DESC, name
CREATE OR REPLACE VIEW gpu_annotations_by_rank AS
SELECT run, rank, phase, name, calls, cpu_us, gpu_us, gpu_source, gpu_interval_count
FROM int_gpu_annotations
WHERE grain = 'rank';
