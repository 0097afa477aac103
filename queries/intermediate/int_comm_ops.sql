-- Every communication op, classified by comm_patterns: on GPU traces the
-- collective kernel (NCCL/RCCL, DeepEP); on CPU-only traces the gloo:*
-- annotation, else (trace files with neither) the c10d::* op. Message size
-- from the kernel's args, else the record_param_comms op sharing its
-- External id, else (c10d::* ops) the record_param_comms op inside them,
-- else (CPU) the recorded Input Dims and Input type; group size from the
-- same, else the trace's process groups.
-- Grain: one row per communication op.
-- requires: stg_kernels, stg_annotations, stg_cpu_ops, int_comm_names, int_launch_steps, int_step_buckets, stg_comm_args, stg_process_groups, dtype_sizes
-- materialize: per trace
CREATE OR REPLACE VIEW int_comm_ops AS
WITH kernels AS (
    SELECT
        k.run, k.rank, k.phase, k.file_id, k.event_id, 'kernel' AS source, n.library, k.name,
        coalesce(n.collective, a.collective_name, p.collective_name, n.name_collective) AS raw_collective,
        k.ts_ns, k.dur_ns, k.device, k.stream, l.step,
        coalesce(greatest(a.in_msg_nelems, a.out_msg_nelems), greatest(p.in_msg_nelems, p.out_msg_nelems)) AS msg_nelems,
        coalesce(a.dtype, p.dtype) AS dtype,
        coalesce(a.group_size, p.group_size) AS group_size,
        coalesce(a.pg_name, p.pg_name) AS pg_name,
        coalesce(a.pg_desc, p.pg_desc) AS pg_desc
    FROM stg_kernels k
    JOIN int_comm_names n ON n.source = 'kernel' AND n.name = k.name
    LEFT JOIN int_launch_steps l
        ON l.file_id = k.file_id
       AND l.correlation = k.correlation
    LEFT JOIN stg_comm_args a
        ON a.file_id = k.file_id
       AND a.event_id = k.event_id AND a.source = 'kernel'
    LEFT JOIN stg_comm_args p
        ON p.file_id = k.file_id
       AND p.external_id = coalesce(l.external_id, k.external_id) AND p.name = 'record_param_comms'
),
-- the communication annotations and CPU ops (each joined to the names on its
-- own: DuckDB then reads args only where a name matched, not for every event)
cpu AS (
    SELECT a.run, a.rank, a.phase, a.file_id, a.event_id, 'annotation' AS source, a.name, a.ts_ns, a.dur_ns,
           a.pid, a.tid, a.args, n.library, n.collective, n.name_collective
    FROM stg_annotations a
    JOIN int_comm_names n ON n.source = 'annotation' AND n.name = a.name
    WHERE a.side = 'cpu'
    UNION ALL
    SELECT o.run, o.rank, o.phase, o.file_id, o.event_id, 'cpu_op' AS source, o.name, o.ts_ns, o.dur_ns,
           o.pid, o.tid, o.args, n.library, n.collective, n.name_collective
    FROM stg_cpu_ops o
    JOIN int_comm_names n ON n.source = 'cpu_op' AND n.name = o.name
),
-- record_param_comms ops with their args: a c10d::* op holds one (same thread, inside its time)
param_comms AS (
    SELECT o.file_id, o.pid, o.tid, o.ts_ns, o.end_ns, p.in_msg_nelems, p.out_msg_nelems, p.dtype, p.group_size,
           p.pg_name, p.pg_desc
    FROM stg_cpu_ops o
    JOIN stg_comm_args p ON p.file_id = o.file_id AND p.event_id = o.event_id
    WHERE o.name = 'record_param_comms'
),
cpu_comm AS (
    SELECT
        c.*, c.args -> '$."Input Dims"[0]' AS dims,
        greatest(p.in_msg_nelems, p.out_msg_nelems) AS param_nelems, p.dtype AS param_dtype,
        p.group_size AS param_group_size, p.pg_name AS param_pg_name, p.pg_desc AS param_pg_desc
    FROM cpu c
    LEFT JOIN param_comms p
        ON c.source = 'cpu_op' AND p.file_id = c.file_id AND p.pid = c.pid AND p.tid = c.tid
       AND p.ts_ns >= c.ts_ns AND p.end_ns <= c.ts_ns + c.dur_ns
    QUALIFY row_number() OVER (PARTITION BY c.file_id, c.event_id ORDER BY p.ts_ns NULLS LAST) = 1
),
cpu_ops AS (
    SELECT
        c.run, c.rank, c.phase, c.file_id, c.event_id, c.source, c.library, c.name,
        coalesce(c.collective, c.name_collective) AS raw_collective,
        c.ts_ns, c.dur_ns, NULL::BIGINT AS device, NULL::BIGINT AS stream,
        s.step,
        -- the record_param_comms op inside, else the recorded input: one tensor,
        -- the product of its dims; a tensor list, the sum over its tensors
        coalesce(c.param_nelems, CASE WHEN json_type(c.dims -> '$[0]') = 'ARRAY'
             THEN CAST(list_sum(list_transform(TRY_CAST(c.dims AS BIGINT[][]), lambda d: list_product(d))) AS BIGINT)
             ELSE CAST(list_product(TRY_CAST(c.dims AS BIGINT[])) AS BIGINT)
        END) AS msg_nelems,
        coalesce(c.param_dtype, c.args ->> '$."Input type"[0]') AS dtype,
        c.param_group_size AS group_size, c.param_pg_name AS pg_name, c.param_pg_desc AS pg_desc
    FROM cpu_comm c
    LEFT JOIN (SELECT DISTINCT file_id, width_ns FROM int_step_buckets) w
        ON w.file_id = c.file_id
    LEFT JOIN int_step_buckets s
        ON s.file_id = c.file_id
       AND s.bucket = c.ts_ns // w.width_ns AND c.ts_ns >= s.start_ns AND c.ts_ns < s.end_ns
),
preferred AS (
    SELECT * FROM kernels
    UNION ALL
    SELECT * FROM cpu_ops WHERE source = 'annotation'
),
ops AS (
    SELECT * FROM preferred
    UNION ALL
    SELECT * FROM cpu_ops c
    WHERE c.source = 'cpu_op' AND NOT EXISTS (SELECT 1 FROM preferred p WHERE p.file_id = c.file_id)
),
file_groups AS (
    SELECT file_id, CASE WHEN count(DISTINCT pg_size) = 1 THEN min(pg_size) END AS only_pg_size
    FROM stg_process_groups
    GROUP BY file_id
),
classified AS (
    SELECT
        o.*,
        lower(regexp_replace(coalesce(o.raw_collective, ''), '[^A-Za-z0-9]', '', 'g')) AS k,
        coalesce(o.group_size, g.pg_size, f.only_pg_size) AS n_ranks,
        lower(regexp_replace(trim(o.dtype), '^(c10::|at::|torch\.)', '')) AS dtype_key
    FROM ops o
    LEFT JOIN stg_process_groups g ON g.file_id = o.file_id AND g.pg_name = o.pg_name
    LEFT JOIN file_groups f ON f.file_id = o.file_id
),
named AS (
    SELECT
        *,
        CASE
            WHEN k LIKE 'allreduce%' THEN 'allreduce'
            WHEN k LIKE 'allgather%' THEN 'allgather'
            WHEN k LIKE 'reducescatter%' THEN 'reducescatter'
            WHEN k LIKE 'alltoall%' THEN 'alltoall'
            WHEN k LIKE 'broadcast%' THEN 'broadcast'
            WHEN k LIKE 'sendrecv%' THEN 'sendrecv'
            WHEN k LIKE 'send%' THEN 'send'
            WHEN k LIKE 'recv%' THEN 'recv'
            WHEN k LIKE 'reduce%' THEN 'reduce'
            WHEN k LIKE 'gather%' THEN 'gather'
            WHEN k LIKE 'scatter%' THEN 'scatter'
            WHEN k LIKE '%barrier%' THEN 'barrier'
            WHEN k IN ('', 'generic') THEN 'unknown'
            ELSE k
        END AS collective
    FROM classified
)
SELECT
    c.run, c.rank, c.phase, c.file_id, c.event_id,
    -- kernel (GPU kernel), annotation (gloo:* on the CPU) or cpu_op (c10d::*).
    c.source,
    -- Communication library (nccl, deepep, gloo, c10d, ...).
    c.library,
    -- Event name.
    c.name,
    -- Collective, lower case without separators (allreduce, allgather, reducescatter, alltoall, broadcast, reduce, sendrecv, send, recv, barrier, dispatch, combine, notify, ...); unknown when neither args nor name say.
    c.collective,
    -- Start, nanoseconds.
    c.ts_ns,
    -- Duration, nanoseconds.
    c.dur_ns,
    -- End, nanoseconds.
    c.ts_ns + c.dur_ns AS end_ns,
    -- GPU index (NULL on the CPU).
    c.device,
    -- Stream (NULL on the CPU).
    c.stream,
    -- Profiler step (kernels: of the launch); NULL outside steps.
    c.step,
    -- Elements in the message: the larger of input and output (the total size, as nccl-tests counts it); NULL when unknown.
    c.msg_nelems,
    -- Element type as the trace writes it.
    c.dtype,
    -- Message size (msg_nelems x element size), bytes; NULL when unknown.
    c.msg_nelems * d.element_bytes AS msg_bytes,
    -- Ranks taking part; NULL when unknown.
    c.n_ranks AS group_size,
    -- Process group name.
    c.pg_name,
    -- Process group description.
    c.pg_desc
FROM named c
LEFT JOIN dtype_sizes d ON d.dtype = c.dtype_key;
