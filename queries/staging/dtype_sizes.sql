-- Bytes per element of each tensor element type, under the spellings traces
-- use: Kineto's `dtype` arg (Float, BFloat16, Long, ...) and record_shapes'
-- `Input type` (float, c10::BFloat16, long int, ...). Used to turn element
-- counts into message bytes; join on lower case, without a c10:: / at:: /
-- torch. prefix.
-- Grain: one row per spelling.
CREATE OR REPLACE VIEW dtype_sizes AS
SELECT
    -- Element type, lower case, no namespace prefix (float, bfloat16, long int, ...).
    dtype,
    -- Bytes per element.
    element_bytes
FROM (VALUES
    ('float', 4), ('float32', 4), ('double', 8), ('float64', 8),
    ('half', 2), ('float16', 2), ('bfloat16', 2),
    ('float8_e4m3fn', 1), ('float8_e4m3fnuz', 1), ('float8_e5m2', 1), ('float8_e5m2fnuz', 1),
    ('float8_e8m0fnu', 1),
    ('long', 8), ('long int', 8), ('int64', 8), ('int64_t', 8),
    ('int', 4), ('int32', 4), ('int32_t', 4),
    ('short', 2), ('short int', 2), ('int16', 2), ('int16_t', 2),
    ('char', 1), ('signed char', 1), ('int8', 1), ('int8_t', 1),
    ('byte', 1), ('unsigned char', 1), ('uint8', 1), ('uint8_t', 1), ('bool', 1),
    ('uint16', 2), ('uint32', 4), ('uint64', 8),
    ('complexhalf', 4), ('complex<c10::half>', 4), ('complex<half>', 4),
    ('complexfloat', 8), ('complex<float>', 8),
    ('complexdouble', 16), ('complex<double>', 16)
) AS t(dtype, element_bytes);
