"""The value rules: how a JSON value of an event becomes a column value.

The reference reader (reader.py) applies these to every event; the C reader
(_fastparse.c) mirrors them for what it takes and declines the rest, and
tests/test_fastparse.py checks the two agree.

- Times (``ts``, ``dur``): microseconds -> exact integer nanoseconds.
  Numbers with a fraction arrive as Decimals (ijson's ``use_float=False``),
  so ``1712195495737655.080`` (an epoch time past 2**43 µs, where a double
  no longer holds the fraction) is exactly ``1712195495737655080``; a
  fraction finer than 1 ns rounds half to even. Non-finite or non-numeric
  values are NULL; a numeric string is read as its number. Times past
  +-2**62 ns are NULL (reader.py's columns), so sums never overflow BIGINT.
- Typed args columns (schema.ARG_COLUMNS): int64 from integers (or
  integral Decimals, floats, numeric strings) within int64, else NULL;
  double from any number; string from strings as they are, anything else as
  its JSON text; int64 lists item by item.
- Ids (``pid``, ``tid``, ``id``): text: strings as they are, numbers as
  Python writes them (integral Decimals as integers).
- ``args``: the object's JSON text, without whitespace; numbers with a
  fraction as doubles, non-finite ones as null.

This module knows nothing of files, Arrow batches, DuckDB or click.
"""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal, InvalidOperation
from typing import Any

import pyarrow as pa

from ..schema import ARG_COLUMNS

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
# ts_ns / dur_ns beyond this (146 years) are read as NULL, so that ts + dur
# and ts + baseTimeNanoseconds never overflow BIGINT downstream.
TIME_LIMIT_NS = 1 << 62
SURROGATE = re.compile("[\ud800-\udfff]")
FLOW_PHASES = frozenset("stf")


def to_ns(v: Any) -> int | None:
    """Microseconds (int, Decimal, float or numeric string) -> exact int ns."""
    t = type(v)
    if t is int:
        return v * 1000
    if t is Decimal:
        if not v.is_finite():
            return None
        return int((v * 1000).to_integral_value())
    if v is None or t is bool:
        return None
    if t is float:
        return round(v * 1000) if math.isfinite(v) else None
    if t is str:
        try:
            return to_ns(Decimal(v))
        except InvalidOperation:
            return None
    return None


def as_int(v: Any) -> int | None:
    t = type(v)
    if t is int:
        return v if INT64_MIN <= v <= INT64_MAX else None
    if t is Decimal:
        if v.is_finite() and v == v.to_integral_value():
            return as_int(int(v))
        return None
    if t is str:
        try:
            return as_int(int(v))
        except ValueError:
            return None
    if t is float and v.is_integer():
        return as_int(int(v))
    return None


def as_float(v: Any) -> float | None:
    if type(v) in (int, float, Decimal):
        try:
            return float(v)
        except (OverflowError, ValueError):
            return None
    return None


def as_text(v: Any) -> str | None:
    if v is None:
        return None
    if type(v) is str:
        return v
    return json.dumps(jsonable(v), ensure_ascii=False)


def as_int_list(v: Any) -> list | None:
    if type(v) is list:
        return [as_int(x) for x in v]
    return None


_CONVERT = {"int64": as_int, "double": as_float, "string": as_text}


def _converter(typ: pa.DataType):
    if pa.types.is_list(typ):
        return as_int_list
    return _CONVERT[str(typ)]


# (args key, column, converter) of each typed args column, in schema order.
ARG_CONVERTERS = [(key, col, _converter(typ)) for key, (col, typ) in ARG_COLUMNS.items()]


def jsonable(v: Any) -> Any:
    """Decimals to float / int, recursively, for the JSON writers."""
    if isinstance(v, Decimal):
        if v.is_finite() and v == v.to_integral_value() and abs(v) < 2**63:
            return int(v)
        return float(v)
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, list):
        return [jsonable(x) for x in v]
    return v


def without_surrogates(v: Any) -> Any:
    """``v`` with U+FFFD for each lone surrogate in its strings and keys."""
    if isinstance(v, str):
        return SURROGATE.sub("\ufffd", v)
    if isinstance(v, dict):
        return {without_surrogates(k): without_surrogates(x) for k, x in v.items()}
    if isinstance(v, list):
        return [without_surrogates(x) for x in v]
    return v


def _number(v: Any) -> Any:
    """json.dumps default: Decimals (numbers written with a fraction or an
    exponent) as doubles, non-finite ones as null."""
    if isinstance(v, Decimal):
        f = float(v)
        return f if math.isfinite(f) else None
    return str(v)


def dump_args(args: Any) -> str | None:
    """The args column: the value's JSON text, without whitespace."""
    if args is None:
        return None
    return json.dumps(args, ensure_ascii=False, separators=(",", ":"), default=_number)


def id_text(v: Any) -> str | None:
    """pid, tid, id: text."""
    if v is None:
        return None
    if type(v) is str:
        return v
    return str(jsonable(v))
