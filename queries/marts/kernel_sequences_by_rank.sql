-- The most frequent runs of k consecutive kernels on a stream, per rank
-- (kernel_sequences says how they are counted).
-- `tracedb query kernel_sequences --rank 0 --k 2`
-- Grain: one row per run, rank, phase, device, stream and sequence of k kernel names.
-- param k: kernels in a sequence (default 3)
-- requires: int_kernel_sequences
-- order by: occurrences DESC, total_us DESC, sequence
CREATE OR REPLACE MACRO kernel_sequences_by_rank(k := 3) AS TABLE
SELECT run, rank, phase, device, stream, sequence, kernel_names, occurrences, total_us, mean_us, span_us
FROM int_kernel_sequences(k := k)
WHERE grain = 'rank';
