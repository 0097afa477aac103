-- Process groups each trace file declares (distributedInfo.pg_config), with
-- the backend and world size (one row with NULL pg_name when the trace
-- declares none).
-- Grain: one row per trace file and process group.
CREATE OR REPLACE VIEW stg_process_groups AS
WITH info AS (
    SELECT run, rank, phase, file_id, distributed_info AS d
    FROM traces
    WHERE status = 'ok'
),
groups AS (
    SELECT run, rank, phase, file_id, d, unnest(coalesce(CAST(d -> '$.pg_config' AS JSON[]), [NULL::JSON])) AS pg
    FROM info
)
SELECT
    run,
    rank,
    phase,
    file_id,
    -- Communication backend (nccl, gloo, ...).
    d ->> '$.backend' AS backend,
    -- Ranks in the job (distributedInfo.world_size).
    TRY_CAST(d ->> '$.world_size' AS BIGINT) AS world_size,
    -- Process group name.
    pg ->> '$.pg_name' AS pg_name,
    -- Process group description (default_pg, ...).
    pg ->> '$.pg_desc' AS pg_desc,
    -- Ranks in the process group.
    TRY_CAST(pg ->> '$.pg_size' AS BIGINT) AS pg_size
FROM groups;
