-- Memory copies and sets on the GPU with their direction: HtoD, DtoH, DtoD,
-- PtoP (or whatever word follows "Memcpy" in the name) and memset.
-- Grain: one row per copy or memset.
-- requires: stg_memcpy
CREATE OR REPLACE VIEW int_memory_ops AS
SELECT
    run, rank, phase, file_id, event_id,
    -- HtoD, DtoH, DtoD, PtoP, ... or memset.
    CASE WHEN kind = 'memset' THEN 'memset'
         ELSE coalesce(nullif(regexp_extract(name, 'Memcpy\s+(\w+)', 1), ''), 'memcpy') END AS kind,
    -- Name as the trace writes it (Memcpy HtoD (Pageable -> Device), Memset (Device)).
    name,
    -- GPU index.
    device,
    -- Stream.
    stream,
    -- Start, nanoseconds.
    ts_ns,
    -- Duration, nanoseconds.
    dur_ns,
    -- End, nanoseconds.
    end_ns,
    -- Bytes copied or set.
    bytes,
    -- First copy or memset of the trace file (the time series' origin), nanoseconds.
    min(ts_ns) OVER (PARTITION BY file_id) AS origin_ns
FROM stg_memcpy;
