-- Which user annotations enclose other annotations: a region such as
-- forward or ProfilerStep#N whose time is that of the regions inside it
-- (attn(F), mlp(F)) plus a little of its own. A call encloses another when
-- the next annotation to start on its thread starts before it ends (ranges
-- on one thread nest). ProfilerStep#N counts as ProfilerStep#*, as the
-- regressions compare it. The report leaves enclosing regions out of its
-- regressions chart, so that the region that changed tops it. Computed
-- once per trace at ingest (a scan of the annotations otherwise).
-- Grain: one row per trace file and annotation name.
-- requires: stg_annotations
-- materialize: per trace
CREATE OR REPLACE VIEW int_annotation_nesting AS
WITH ordered AS (
    SELECT
        run, rank, phase, file_id, name, end_ns,
        lead(ts_ns) OVER (PARTITION BY file_id, pid, tid ORDER BY ts_ns, end_ns DESC) AS next_ts_ns
    FROM stg_annotations
    WHERE side = 'cpu'
)
SELECT
    run, rank, phase, file_id,
    -- Annotation name (ProfilerStep#N as ProfilerStep#*).
    CASE WHEN name LIKE 'ProfilerStep#%' THEN 'ProfilerStep#*' ELSE name END AS name,
    -- Calls of the annotation.
    count(*) AS call_count,
    -- Calls with another annotation inside them.
    count(*) FILTER (WHERE next_ts_ns < end_ns) AS enclosing_count
FROM ordered
GROUP BY ALL;
