-- How long each profiler step took on each rank: its ProfilerStep#N range
-- on the CPU, the trace files of a rank and phase together. What step_times
-- shows and stragglers ranks.
-- Grain: one row per run, rank, phase and step.
-- requires: int_steps
CREATE OR REPLACE VIEW int_step_times AS
SELECT
    run, rank, phase,
    -- Step number N of ProfilerStep#N.
    step,
    -- ProfilerStep#N.
    min(step_name) AS step_name,
    -- Step start, nanoseconds.
    min(ts_ns) AS ts_ns,
    -- Step duration on the CPU (the ProfilerStep#N range), nanoseconds.
    sum(dur_ns) AS dur_ns
FROM int_steps
GROUP BY run, rank, phase, step;
