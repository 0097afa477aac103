-- Thread names from the trace's metadata events (ph M).
-- Grain: one row per run, rank, phase, trace file, pid and tid.
CREATE OR REPLACE VIEW threads AS
SELECT
    run,
    rank,
    phase,
    file_id,
    -- Process id.
    pid,
    -- Thread id.
    tid,
    -- thread_name.
    max(args ->> 'name') FILTER (name = 'thread_name') AS thread_name,
    -- thread_sort_index.
    max(TRY_CAST(args ->> 'sort_index' AS BIGINT)) FILTER (name = 'thread_sort_index') AS sort_index
FROM events
WHERE ph = 'M' AND name LIKE 'thread_%'
GROUP BY run, rank, phase, file_id, pid, tid;
