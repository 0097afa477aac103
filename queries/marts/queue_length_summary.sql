-- How deep each GPU stream's launch queue runs: operations launched on the
-- CPU and not yet finished on the GPU (int_queue_lengths), over the time from
-- the stream's first launch to its last end. CUDA blocks the launching
-- thread once 1024 operations are pending on a stream; full_queue_us is the
-- time the queue stood at that depth (HTA's
-- get_time_spent_blocked_on_full_queue with max_queue_length 1024), the time
-- the CPU could not launch more. `tracedb query queue_length_summary --run v2`
-- Grain: one row per run, rank, phase, device and stream.
-- requires: int_queue_lengths
-- order by: run, phase, rank, device, stream
CREATE OR REPLACE VIEW queue_length_summary AS
WITH segments AS (
    SELECT run, rank, phase, file_id, device, stream, queue_length, next_ts_ns - ts_ns AS dur_ns,
           max(queue_length) OVER (PARTITION BY run, rank, phase, device, stream) AS max_length
    FROM int_queue_lengths
    WHERE next_ts_ns IS NOT NULL
)
SELECT
    run, rank, phase,
    -- GPU index.
    device,
    -- Stream.
    stream,
    -- Time from the stream's first launch to its last end (summed over trace files), microseconds.
    sum(dur_ns) / 1e3 AS span_us,
    -- Time-weighted mean queue length over the span, operations.
    sum(queue_length * dur_ns) / sum(dur_ns) AS mean_queue_length,
    -- Deepest queue, operations.
    max(queue_length) AS max_queue_length,
    -- Time at the deepest queue, microseconds.
    sum(CASE WHEN queue_length = max_length THEN dur_ns ELSE 0 END) / 1e3 AS time_at_max_us,
    -- Time with no operation pending, microseconds.
    sum(CASE WHEN queue_length = 0 THEN dur_ns ELSE 0 END) / 1e3 AS empty_us,
    -- Time with 1024 or more pending (the launching thread blocks), microseconds.
    sum(CASE WHEN queue_length >= 1024 THEN dur_ns ELSE 0 END) / 1e3 AS full_queue_us
FROM segments
GROUP BY run, rank, phase, device, stream;
