-- CPU operators (aten::*, autograd, c10d::*, ...) with their self time
-- (time not spent in child slices on the same thread).
-- Grain: one row per op call.
CREATE OR REPLACE VIEW stg_cpu_ops AS
SELECT
    run,
    rank,
    phase,
    file_id,
    event_id,
    -- Operator name.
    name,
    -- Start, nanoseconds.
    ts_ns,
    -- Duration, nanoseconds.
    dur_ns,
    -- Duration less direct child slices on the same thread, nanoseconds.
    self_ns,
    -- End (ts_ns + dur_ns), nanoseconds.
    ts_ns + dur_ns AS end_ns,
    -- Process id.
    pid,
    -- Thread id.
    tid,
    -- External id shared with the runtime calls and kernels it launched.
    external_id,
    -- Autograd sequence number.
    sequence_number,
    -- Complete args (Input Dims, Input type, ...).
    args
FROM events
WHERE ph = 'X' AND lower(cat) IN ('cpu_op', 'operator') AND dur_ns IS NOT NULL;
