-- Which events count as communication, and which collective each is: the
-- patterns collectives, comm_latency, overlap and gpu_utilization classify
-- kernels, CPU annotations and CPU ops with. Defaults: NCCL/RCCL kernels
-- (ncclKernel_*, ncclDevKernel_*), DeepEP's dispatch/combine/notify kernels
-- (dpsk::ep::..., deep_ep::...), gloo:* annotations and c10d::* ops (used only
-- for trace files with neither comm kernels nor gloo annotations). To change
-- them, write <warehouse>/comm_patterns.csv with columns source, pattern,
-- library, collective (start from `tracedb query comm_patterns -f csv`): when
-- present it replaces the defaults at the next catalog build (any ingest).
-- Grain: one row per pattern; an event matching several takes the first.
-- order by: priority
CREATE OR REPLACE VIEW comm_patterns AS
WITH defaults AS (
    SELECT priority, source, pattern, library, collective
    FROM (VALUES
        (1, 'kernel', '(?:^|[^A-Za-z])nccl(?:Dev)?Kernel_([A-Za-z]+)', 'nccl', NULL),
        (2, 'kernel', '(?:dpsk::ep|deep_ep)::\w+::(dispatch|combine)\b', 'deepep', NULL),
        (3, 'kernel', '(?:dpsk::ep|deep_ep)::\w+::\w*notify', 'deepep', 'notify'),
        (4, 'annotation', '^gloo:(\w+)', 'gloo', NULL),
        (5, 'cpu_op', '^c10d::(\w+)', 'c10d', NULL)
    ) AS t(priority, source, pattern, library, collective)
)
SELECT
    -- Order of the patterns: an event matching several takes the first.
    priority,
    -- Events the pattern applies to: kernel (GPU kernels), annotation (CPU user annotations) or cpu_op.
    source,
    -- Regular expression (RE2, matched anywhere in the event name; prefix (?i) to ignore case). Its first capture group, if any, names the collective.
    pattern,
    -- Communication library: nccl (NCCL and RCCL), deepep, gloo, c10d, ...
    library,
    -- Collective for every match; NULL: the event's args (Collective name), else the capture group.
    collective
FROM user_comm_patterns
UNION ALL
SELECT priority, source, pattern, library, collective
FROM defaults
WHERE NOT EXISTS (SELECT 1 FROM user_comm_patterns);
