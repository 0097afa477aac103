-- CUPTI profiler counters per kernel over all ranks, from traces recorded
-- with the CUPTI profiler (experimental_config profiler_metrics: the
-- cuda_profiler_range events, each one kernel run with its counters). HTA's
-- get_cupti_counter_data_with_operators also ties each range to its CPU
-- operator; here ranges are summed per kernel name. Per rank:
-- cupti_counters_by_rank. `tracedb query cupti_counters --run v2`
-- Grain: one row per run, phase, kernel name and counter.
-- requires: int_cupti_counters
-- order by: run, phase, name, counter
CREATE OR REPLACE VIEW cupti_counters AS
SELECT run, phase, name, counter, kernel_count, total_value, mean_value, range_us
FROM int_cupti_counters
WHERE grain = 'all';
