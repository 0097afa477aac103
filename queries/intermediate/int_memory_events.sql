-- The caching allocator's [memory] instant events that PyTorch's profiler
-- writes with profile_memory=True: each allocation (Bytes > 0) or free
-- (Bytes < 0) with the device's totals right after it.
-- Grain: one row per [memory] event.
CREATE OR REPLACE VIEW int_memory_events AS
SELECT
    run, rank, phase, file_id, event_id,
    -- Instant of the allocation or free, nanoseconds.
    ts_ns,
    -- cpu (Device Type 0), cuda (1), or the Device Type number as text.
    CASE json_extract_string(args, '$."Device Type"') WHEN '0' THEN 'cpu' WHEN '1' THEN 'cuda' ELSE json_extract_string(args, '$."Device Type"') END AS device_type,
    -- Device Id (-1 for the CPU).
    TRY_CAST(json_extract_string(args, '$."Device Id"') AS BIGINT) AS device,
    -- Bytes allocated (positive) or freed (negative).
    TRY_CAST(json_extract_string(args, '$."Bytes"') AS BIGINT) AS bytes,
    -- Bytes allocated on the device after the event.
    TRY_CAST(json_extract_string(args, '$."Total Allocated"') AS BIGINT) AS allocated_bytes,
    -- Bytes the allocator holds (reserved) on the device after the event.
    TRY_CAST(json_extract_string(args, '$."Total Reserved"') AS BIGINT) AS reserved_bytes,
    -- Process id of the allocating thread.
    pid,
    -- Allocating thread.
    tid
FROM events
WHERE ph IN ('i', 'I') AND name = '[memory]';
