-- Names of kernels, CPU annotations and CPU ops that comm_patterns counts as
-- communication, with the library, fixed collective and first capture group
-- of the first matching pattern. Names are matched once each, not once per
-- event.
-- Grain: one row per source and name.
-- requires: stg_kernels, stg_annotations, stg_cpu_ops, comm_patterns
CREATE OR REPLACE VIEW int_comm_names AS
WITH names AS (
    SELECT DISTINCT 'kernel' AS source, name FROM stg_kernels
    UNION ALL
    SELECT DISTINCT 'annotation' AS source, name FROM stg_annotations WHERE side = 'cpu'
    UNION ALL
    SELECT DISTINCT 'cpu_op' AS source, name FROM stg_cpu_ops
),
matches AS (
    SELECT
        n.source, n.name, p.priority, p.library, p.collective,
        nullif(regexp_extract(n.name, p.pattern, 1), '') AS name_collective
    FROM names n
    JOIN comm_patterns p ON p.source = n.source AND regexp_matches(n.name, p.pattern)
)
SELECT
    -- kernel, annotation or cpu_op.
    source,
    -- Event name.
    name,
    -- Communication library of the matching pattern.
    library,
    -- The pattern's fixed collective; NULL when it has none.
    collective,
    -- The pattern's first capture group in the name, as written (AllReduce, all_reduce, ...); NULL without one.
    name_collective
FROM matches
QUALIFY row_number() OVER (PARTITION BY source, name ORDER BY priority) = 1;
