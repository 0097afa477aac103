-- Time on the GPU per user annotation, beside its CPU time, over all ranks:
-- the union of its GPU-side annotation ranges (gpu_user_annotation) where
-- the trace has them, else the union of the kernels, copies and sets
-- launched inside its CPU ranges (int_gpu_annotations has the rules).
-- `annotations` gives CPU time and the summed time of kernels launched
-- inside; this gives the wall time the GPU spent on it. HTA's
-- get_gpu_user_annotation_breakdown sums GPU annotation durations per name
-- (overlapping ranges, e.g. one per stream, count twice there, once here).
-- Per rank: gpu_annotations_by_rank. `tracedb query gpu_annotations --run v2`
-- Grain: one row per run, phase and annotation name.
-- requires: int_gpu_annotations
-- order by: gpu_us DESC, name
CREATE OR REPLACE VIEW gpu_annotations AS
SELECT run, phase, name, calls, cpu_us, gpu_us, gpu_source, gpu_interval_count
FROM int_gpu_annotations
WHERE grain = 'all';
