-- Why each GPU stream sits idle, summed over ranks: host_wait (the GPU waits
-- for the CPU to enqueue), kernel_wait (gaps under 30 ns between back-to-back
-- operations) and other, as HTA's get_idle_time_breakdown splits them; the
-- rules are in idle_breakdown_by_rank (what `--rank N` shows).
-- `tracedb query idle_breakdown --run v2`
-- Grain: one row per run, phase, device, stream and idle category.
-- requires: idle_breakdown_by_rank
-- order by: run, phase, device, stream, category
CREATE OR REPLACE VIEW idle_breakdown AS
SELECT
    run, phase,
    -- GPU index.
    device,
    -- Stream.
    stream,
    -- host_wait, kernel_wait or other.
    category,
    -- Ranks with idle time of this category on this stream.
    count(*) AS rank_count,
    -- Idle gaps of this category.
    sum(gap_count) AS gap_count,
    -- Idle time of this category over all ranks, microseconds.
    sum(idle_us) AS idle_us,
    -- Share of the stream's idle time over all ranks, percent.
    100.0 * sum(idle_us) / sum(sum(idle_us)) OVER (PARTITION BY run, phase, device, stream) AS idle_pct,
    -- Longest gap of this category, microseconds.
    max(max_gap_us) AS max_gap_us
FROM idle_breakdown_by_rank
GROUP BY run, phase, device, stream, category;
