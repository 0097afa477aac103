-- CUPTI profiler counters per kernel and rank (cupti_counters says where
-- they come from). `tracedb query cupti_counters --rank 0`
-- Grain: one row per run, rank, phase, kernel name and counter.
-- requires: int_cupti_counters
-- order by: run, phase, rank, name, counter
CREATE OR REPLACE VIEW cupti_counters_by_rank AS
SELECT run, rank, phase, name, counter, kernel_count, total_value, mean_value, range_us
FROM int_cupti_counters
WHERE grain = 'rank';
