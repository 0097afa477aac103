-- What each collective moves, as Kineto records it in args: on NCCL kernels
-- (recent PyTorch) and on the record_param_comms CPU op c10d wraps each
-- collective in (its kernels share its External id).
-- Grain: one row per kernel or record_param_comms op with such args.
CREATE OR REPLACE VIEW stg_comm_args AS
SELECT
    run, rank, phase, file_id, event_id,
    -- kernel, or cpu_op (record_param_comms).
    CASE WHEN lower(cat) IN ('kernel', 'mtia_ccp_events') THEN 'kernel' ELSE 'cpu_op' END AS source,
    -- Event name.
    name,
    -- External id, shared by record_param_comms and the kernels it launched.
    external_id,
    -- Collective as c10d names it (allreduce, _allgather_base, all_to_all, ...).
    collective_name,
    -- Elements in the input message.
    in_msg_nelems,
    -- Elements in the output message.
    out_msg_nelems,
    -- Ranks in the process group.
    group_size,
    -- Element type (Float, BFloat16, ...).
    dtype,
    -- Process group name.
    pg_name,
    -- Process group description.
    pg_desc
FROM events
WHERE ph = 'X' AND (name = 'record_param_comms' OR collective_name IS NOT NULL OR in_msg_nelems IS NOT NULL);
