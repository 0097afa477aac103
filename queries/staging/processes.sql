-- Process names and labels from the trace's metadata events (ph M).
-- Grain: one row per run, rank, phase, trace file and pid.
CREATE OR REPLACE VIEW processes AS
SELECT
    run,
    rank,
    phase,
    file_id,
    -- Process id as written in the trace.
    pid,
    -- process_name.
    max(args ->> 'name') FILTER (name = 'process_name') AS process_name,
    -- process_labels.
    max(args ->> 'labels') FILTER (name = 'process_labels') AS labels,
    -- process_sort_index.
    max(TRY_CAST(args ->> 'sort_index' AS BIGINT)) FILTER (name = 'process_sort_index') AS sort_index
FROM events
WHERE ph = 'M' AND name LIKE 'process_%'
GROUP BY run, rank, phase, file_id, pid;
