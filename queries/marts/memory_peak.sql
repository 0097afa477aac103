-- The peak of allocated memory per device and what was running at it: the
-- [memory] event that first reached the highest Total Allocated, the CPU op
-- that made the allocation (the innermost op on the allocating thread
-- holding that instant) and the profiler step. Traces recorded with
-- profile_memory=True; over time: memory_timeline.
-- `tracedb query memory_peak --run v2`
-- Grain: one row per run, rank, phase, device type and device.
-- requires: int_memory_events, stg_cpu_ops, int_steps
-- order by: run, phase, rank, device_type, device
CREATE OR REPLACE VIEW memory_peak AS
WITH peaks AS (
    SELECT *
    FROM int_memory_events
    QUALIFY row_number() OVER (PARTITION BY run, rank, phase, device_type, device
                               ORDER BY allocated_bytes DESC, ts_ns, event_id) = 1
),
reserved AS (
    SELECT file_id, device_type, device, max(reserved_bytes) AS max_reserved_bytes
    FROM int_memory_events
    GROUP BY file_id, device_type, device
),
ops AS (
    SELECT p.file_id, p.event_id, o.name
    FROM peaks p
    JOIN stg_cpu_ops o
      ON o.file_id = p.file_id AND o.pid = p.pid AND o.tid = p.tid
     AND o.ts_ns <= p.ts_ns AND p.ts_ns <= o.end_ns
    QUALIFY row_number() OVER (PARTITION BY p.file_id, p.event_id ORDER BY o.ts_ns DESC, o.dur_ns, o.event_id DESC) = 1
)
SELECT
    p.run, p.rank, p.phase,
    -- cpu or cuda.
    p.device_type,
    -- Device Id (-1 for the CPU).
    p.device,
    -- Highest allocated bytes.
    p.allocated_bytes AS peak_allocated_bytes,
    -- Reserved bytes at the peak.
    p.reserved_bytes AS reserved_bytes,
    -- Highest reserved bytes over the trace.
    r.max_reserved_bytes,
    -- Instant the peak was first reached, nanoseconds.
    p.ts_ns AS peak_ts_ns,
    -- Size of the allocation that reached the peak, bytes.
    p.bytes AS peak_allocation_bytes,
    -- Innermost CPU op on the allocating thread at the peak; NULL outside ops.
    o.name AS op_name,
    -- Profiler step holding the peak; NULL outside steps.
    (SELECT min(s.step) FROM int_steps s
     WHERE s.file_id = p.file_id AND s.ts_ns <= p.ts_ns AND p.ts_ns < s.end_ns) AS step
FROM peaks p
JOIN reserved r ON r.file_id = p.file_id AND r.device_type = p.device_type AND r.device = p.device
LEFT JOIN ops o ON o.file_id = p.file_id AND o.event_id = p.event_id;
