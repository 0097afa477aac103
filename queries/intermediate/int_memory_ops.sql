-- Memory copies and sets on the GPU with their direction: HtoD, DtoH, DtoD,
-- PtoP (or whatever word follows "Memcpy" in the name) and memset.
-- Grain: one row per copy or memset.
-- requires: stg_memcpy
CREATE OR REPLACE VIEW int_memory_ops AS
-- The origin per file by a join on run, rank, phase and file_id, not a window:
-- DuckDB turns such a window into a join on its partition and there drops a
-- query's filter on run, and reads every run's files.
WITH origins AS (
    SELECT run, rank, phase, file_id, min(ts_ns) AS origin_ns
    FROM stg_memcpy
    GROUP BY run, rank, phase, file_id
)
SELECT
    m.run, m.rank, m.phase, m.file_id, m.event_id,
    -- HtoD, DtoH, DtoD, PtoP, ... or memset.
    CASE WHEN m.kind = 'memset' THEN 'memset'
         ELSE coalesce(nullif(regexp_extract(m.name, 'Memcpy\s+(\w+)', 1), ''), 'memcpy') END AS kind,
    -- Name as the trace writes it (Memcpy HtoD (Pageable -> Device), Memset (Device)).
    m.name,
    -- GPU index.
    m.device,
    -- Stream.
    m.stream,
    -- Start, nanoseconds.
    m.ts_ns,
    -- Duration, nanoseconds.
    m.dur_ns,
    -- End, nanoseconds.
    m.end_ns,
    -- Bytes copied or set.
    m.bytes,
    -- First copy or memset of the trace file (the time series' origin), nanoseconds.
    o.origin_ns
FROM stg_memcpy m
JOIN origins o ON o.run = m.run AND o.rank = m.rank AND o.phase = m.phase AND o.file_id = m.file_id;
