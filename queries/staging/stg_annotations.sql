-- User annotations (record_function ranges such as ProfilerStep#N or
-- DualPipe's attn(F)), on the CPU and their GPU projections.
-- Grain: one row per annotation range.
CREATE OR REPLACE VIEW stg_annotations AS
SELECT
    run,
    rank,
    phase,
    file_id,
    event_id,
    -- Annotation name.
    name,
    -- cpu (user_annotation) or gpu (gpu_user_annotation).
    CASE WHEN lower(cat) = 'gpu_user_annotation' THEN 'gpu' ELSE 'cpu' END AS side,
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
    -- External id.
    external_id,
    -- Complete args (Input Dims, Input type, ... when shapes were recorded).
    args
FROM events
WHERE ph = 'X' AND lower(cat) IN ('user_annotation', 'gpu_user_annotation') AND dur_ns IS NOT NULL;
