-- Forward passes (or other calls) timed by tracedb.torch.ForwardTimer: the
-- spans its write() puts in a trace (cat 'latency'), each with the clock
-- that measured it.
-- Grain: one row per timed pass.
CREATE OR REPLACE VIEW stg_timer_spans AS
SELECT
    run,
    rank,
    phase,
    file_id,
    event_id,
    -- Span name (the timer's name: forward).
    name,
    -- cuda_event (CUDA events on the stream) or wall (synchronized monotonic clock).
    coalesce(args ->> 'clock', 'unknown') AS clock,
    -- Start, nanoseconds (cuda_event: when the host recorded the start event).
    ts_ns,
    -- Duration, nanoseconds.
    dur_ns
FROM events
WHERE ph = 'X' AND cat = 'latency' AND dur_ns IS NOT NULL;
