-- The profiler step and External id of each correlation's launch call
-- (int_launch_calls without the call itself): what the kernels, copies and
-- collectives of a trace look up, narrow enough to compute once per trace.
-- Grain: one row per run, rank, phase, trace file and correlation id.
-- requires: int_launch_calls
CREATE OR REPLACE VIEW int_launch_steps AS
SELECT
    run, rank, phase, file_id,
    -- Correlation id shared with the kernel or copy the call started.
    correlation,
    -- External id of the CPU op that made the call.
    external_id,
    -- Profiler step whose ProfilerStep#N range holds the call start; NULL outside steps.
    step
FROM int_launch_calls;
