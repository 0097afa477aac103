-- The most frequent runs of k consecutive kernels on a stream, summed over
-- ranks: fusion candidates (a sequence that runs often, with much kernel
-- time or many gaps between its kernels). Occurrences are counted at every
-- starting kernel, so they overlap; copies and memsets are left out. HTA's
-- get_frequent_cuda_kernel_sequences looks for the kernels one CPU operator
-- launches; this looks at what runs back to back on the GPU. Per rank:
-- kernel_sequences_by_rank. `tracedb query kernel_sequences --run v2 --k 4`
-- Grain: one row per run, phase, device, stream and sequence of k kernel names.
-- param k: kernels in a sequence (default 3)
-- requires: int_kernel_sequences
-- order by: occurrences DESC, total_us DESC, sequence
CREATE OR REPLACE MACRO kernel_sequences(k := 3) AS TABLE
SELECT run, phase, device, stream, sequence, kernel_names, rank_count, occurrences, total_us, mean_us, span_us
FROM int_kernel_sequences(k := k)
WHERE grain = 'all';
