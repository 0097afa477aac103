"""The subset of the PostgreSQL frontend/backend protocol (v3) that ``tracedb serve`` speaks.

This module is only the codec: it turns bytes on a socket into frontend
messages and Python values into backend messages. It knows nothing of DuckDB
or of the catalog; :mod:`tracedb.serve.session` drives the conversation.

Reference: https://www.postgresql.org/docs/current/protocol-message-formats.html

What is covered:

- start-up: ``StartupMessage`` (protocol 3.0), ``SSLRequest`` and
  ``GSSENCRequest`` (both answered ``N``: no encryption), ``CancelRequest``;
- authentication: cleartext, MD5 and SCRAM-SHA-256 (without channel binding);
- the simple and the extended query protocol;
- values: text format for every type, binary format for the scalar types
  that drivers ask binary for (integers, floats, numeric, bool, text, bytea,
  date, time, timestamp, timestamptz, interval, uuid, json).

COPY sub-protocol, function calls, replication and notifications are not
covered.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import hashlib
import hmac
import json
import math
import secrets
import struct
import uuid
from dataclasses import dataclass
from typing import Any, BinaryIO, Callable, Iterable, Sequence

PROTOCOL_3_0 = 196608
SSL_REQUEST_CODE = 80877103
GSSENC_REQUEST_CODE = 80877104
CANCEL_REQUEST_CODE = 80877102


class ProtocolError(Exception):
    """A client sent bytes that are not a valid protocol v3 message.

    Internal to the server: a message that cannot be framed ends the session
    with a FATAL ErrorResponse (``sqlstate``, 08P01 unless said otherwise);
    a framed message whose fields do not parse fails alone. It never reaches
    callers of :class:`tracedb.serve.Server`.
    """

    def __init__(self, message: str, sqlstate: str = "08P01") -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


# ---------------------------------------------------------------------------
# Reading frontend messages
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class StartupMessage:
    """The first message of a session: protocol version and parameters."""

    parameters: dict[str, str]


@dataclass(frozen=True)
class SSLRequest:
    """A client asks for TLS (answered with a single ``N``)."""


@dataclass(frozen=True)
class GSSENCRequest:
    """A client asks for GSSAPI encryption (answered with a single ``N``)."""


@dataclass(frozen=True)
class CancelRequest:
    """A client asks, on a new connection, to cancel another session's query."""

    process_id: int
    secret_key: int


class Reader:
    """Parses one message body: integers, C strings and raw bytes, in order."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    def int16(self) -> int:
        return self._unpack("!h", 2)

    def int32(self) -> int:
        return self._unpack("!i", 4)

    def byte(self) -> bytes:
        return self.bytes(1)

    def bytes(self, n: int) -> bytes:
        if n < 0 or self._pos + n > len(self._data):
            raise ProtocolError("message shorter than its fields")
        out = self._data[self._pos : self._pos + n]
        self._pos += n
        return out

    def cstr(self) -> str:
        end = self._data.find(b"\0", self._pos)
        if end < 0:
            raise ProtocolError("unterminated string in message")
        out = self._data[self._pos : end]
        self._pos = end + 1
        return out.decode("utf-8", errors="replace")

    def rest(self) -> bytes:
        out = self._data[self._pos :]
        self._pos = len(self._data)
        return out

    def _unpack(self, fmt: str, size: int) -> int:
        return struct.unpack(fmt, self.bytes(size))[0]


def _read_exact(stream: BinaryIO, n: int) -> bytes | None:
    """Read ``n`` bytes; None on a clean end of stream before the first byte."""
    data = stream.read(n)
    if not data:
        return None
    if len(data) < n:
        raise ProtocolError("connection closed in the middle of a message")
    return data


def read_startup(stream: BinaryIO) -> StartupMessage | SSLRequest | GSSENCRequest | CancelRequest | None:
    """Read the untagged first message of a connection (None: client left)."""
    head = _read_exact(stream, 4)
    if head is None:
        return None
    (length,) = struct.unpack("!i", head)
    if length < 8 or length > 10_000:
        raise ProtocolError(f"invalid start-up packet length {length}")
    body = _read_exact(stream, length - 4)
    if body is None:
        raise ProtocolError("connection closed in the start-up packet")
    r = Reader(body)
    code = r.int32()
    if code == SSL_REQUEST_CODE:
        return SSLRequest()
    if code == GSSENC_REQUEST_CODE:
        return GSSENCRequest()
    if code == CANCEL_REQUEST_CODE:
        return CancelRequest(r.int32(), r.int32())
    if code >> 16 != 3:
        raise ProtocolError(f"unsupported frontend protocol {code >> 16}.{code & 0xFFFF}")
    params: dict[str, str] = {}
    while True:
        key = r.cstr()
        if not key:
            break
        params[key] = r.cstr()
    return StartupMessage(params)


def read_message(stream: BinaryIO, max_bytes: int) -> tuple[bytes, bytes] | None:
    """Read one tagged frontend message as ``(tag, body)``; None at end of stream.

    A message longer than ``max_bytes`` is refused before its body is read.
    """
    tag = _read_exact(stream, 1)
    if tag is None:
        return None
    head = _read_exact(stream, 4)
    if head is None:
        raise ProtocolError("connection closed after a message tag")
    (length,) = struct.unpack("!i", head)
    if length < 4:
        raise ProtocolError(f"invalid message length {length}")
    if length > max_bytes:
        raise ProtocolError(f"message of {length} bytes is longer than the limit of {max_bytes}", "54000")
    body = _read_exact(stream, length - 4) if length > 4 else b""
    if body is None:
        raise ProtocolError("connection closed in the middle of a message")
    return tag, body


# ---------------------------------------------------------------------------
# Writing backend messages
# ---------------------------------------------------------------------------


def _cstr(s: str) -> bytes:
    return s.encode("utf-8") + b"\0"


def message(tag: bytes, payload: bytes = b"") -> bytes:
    """Frame a backend message: tag, int32 length (itself included), payload."""
    return tag + struct.pack("!i", len(payload) + 4) + payload


def authentication_ok() -> bytes:
    return message(b"R", struct.pack("!i", 0))


def authentication_cleartext() -> bytes:
    return message(b"R", struct.pack("!i", 3))


def authentication_md5(salt: bytes) -> bytes:
    return message(b"R", struct.pack("!i", 5) + salt)


def authentication_sasl(mechanisms: Iterable[str]) -> bytes:
    return message(b"R", struct.pack("!i", 10) + b"".join(_cstr(m) for m in mechanisms) + b"\0")


def authentication_sasl_continue(data: bytes) -> bytes:
    return message(b"R", struct.pack("!i", 11) + data)


def authentication_sasl_final(data: bytes) -> bytes:
    return message(b"R", struct.pack("!i", 12) + data)


def parameter_status(name: str, value: str) -> bytes:
    return message(b"S", _cstr(name) + _cstr(value))


def backend_key_data(process_id: int, secret_key: int) -> bytes:
    return message(b"K", struct.pack("!ii", process_id, secret_key))


def ready_for_query(status: bytes) -> bytes:
    """``status``: ``b"I"`` idle, ``b"T"`` in a transaction, ``b"E"`` failed transaction."""
    return message(b"Z", status)


def command_complete(tag: str) -> bytes:
    return message(b"C", _cstr(tag))


def empty_query_response() -> bytes:
    return message(b"I")


def parse_complete() -> bytes:
    return message(b"1")


def bind_complete() -> bytes:
    return message(b"2")


def close_complete() -> bytes:
    return message(b"3")


def no_data() -> bytes:
    return message(b"n")


def portal_suspended() -> bytes:
    return message(b"s")


def parameter_description(type_oids: Sequence[int]) -> bytes:
    return message(b"t", struct.pack("!h", len(type_oids)) + b"".join(struct.pack("!i", o) for o in type_oids))


def error_response(
    code: str,
    text: str,
    *,
    severity: str = "ERROR",
    detail: str | None = None,
    hint: str | None = None,
) -> bytes:
    """An ErrorResponse with SQLSTATE ``code``; FATAL ends the session."""
    return message(b"E", _notice_fields(code, text, severity, detail, hint))


def notice_response(code: str, text: str, *, severity: str = "NOTICE") -> bytes:
    return message(b"N", _notice_fields(code, text, severity, None, None))


def _notice_fields(code: str, text: str, severity: str, detail: str | None, hint: str | None) -> bytes:
    fields = [(b"S", severity), (b"V", severity), (b"C", code), (b"M", text)]
    if detail:
        fields.append((b"D", detail))
    if hint:
        fields.append((b"H", hint))
    return b"".join(k + _cstr(v) for k, v in fields) + b"\0"


@dataclass(frozen=True)
class Column:
    """One field of a RowDescription."""

    name: str
    pg_type: "PgType"
    format: int = 0  # 0 text, 1 binary


def row_description(columns: Sequence[Column]) -> bytes:
    parts = [struct.pack("!h", len(columns))]
    for c in columns:
        parts.append(_cstr(c.name))
        parts.append(struct.pack("!ihihih", 0, 0, c.pg_type.oid, c.pg_type.typlen, -1, c.format))
    return message(b"T", b"".join(parts))


def data_row(cells: Sequence[bytes | None]) -> bytes:
    parts = [struct.pack("!h", len(cells))]
    for cell in cells:
        if cell is None:
            parts.append(b"\xff\xff\xff\xff")
        else:
            parts.append(struct.pack("!i", len(cell)))
            parts.append(cell)
    return message(b"D", b"".join(parts))


# ---------------------------------------------------------------------------
# Authentication helpers
# ---------------------------------------------------------------------------


def md5_password_hash(user: str, password: str, salt: bytes) -> str:
    """What a client sends for MD5 auth: ``'md5' + md5(md5(password + user) + salt)``."""
    inner = hashlib.md5((password + user).encode("utf-8")).hexdigest()
    return "md5" + hashlib.md5(inner.encode("ascii") + salt).hexdigest()


class ScramVerifier:
    """Server side of SCRAM-SHA-256 (RFC 5802/7677) without channel binding.

    Not on ``scramp``: its server refuses the empty user name (``n=,``) that
    libpq and every PostgreSQL client send in the client-first message.

    One verifier holds the salted password (derived once, 4096 iterations);
    :meth:`exchange` runs one authentication.
    """

    MECHANISM = "SCRAM-SHA-256"
    ITERATIONS = 4096

    def __init__(self, password: str) -> None:
        self._salt = secrets.token_bytes(16)
        salted = hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), self._salt, self.ITERATIONS)
        self._stored_key = hashlib.sha256(_hmac(salted, b"Client Key")).digest()
        self._server_key = _hmac(salted, b"Server Key")

    def exchange(self, client_first: bytes, read_response: Callable[[bytes], bytes]) -> bytes | None:
        """Check one client; ``read_response(server_first)`` sends that and returns the client-final.

        Returns the server-final message on success, None if the proof is wrong.
        """
        try:
            text = client_first.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ProtocolError("SCRAM client-first-message is not UTF-8") from e
        gs2_flag, _, rest = text.partition(",")
        if gs2_flag.startswith("p"):
            raise ProtocolError("SCRAM channel binding is not supported (connect without TLS)")
        _authzid, _, client_first_bare = rest.partition(",")
        attrs = _scram_attrs(client_first_bare)
        if "r" not in attrs:
            raise ProtocolError("SCRAM client-first-message without a nonce")
        nonce = attrs["r"] + base64.b64encode(secrets.token_bytes(18)).decode("ascii")
        server_first = f"r={nonce},s={base64.b64encode(self._salt).decode('ascii')},i={self.ITERATIONS}"
        try:
            client_final = read_response(server_first.encode("utf-8")).decode("utf-8")
        except UnicodeDecodeError as e:
            raise ProtocolError("SCRAM client-final-message is not UTF-8") from e
        without_proof, _, proof_part = client_final.rpartition(",p=")
        final_attrs = _scram_attrs(without_proof)
        if final_attrs.get("r") != nonce or not proof_part:
            return None
        auth_message = f"{client_first_bare},{server_first},{without_proof}".encode("utf-8")
        signature = _hmac(self._stored_key, auth_message)
        try:
            proof = base64.b64decode(proof_part, validate=True)
        except ValueError:
            return None
        if len(proof) != len(signature):
            return None
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(hashlib.sha256(client_key).digest(), self._stored_key):
            return None
        server_signature = _hmac(self._server_key, auth_message)
        return b"v=" + base64.b64encode(server_signature)


def _hmac(key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hashlib.sha256).digest()


def _scram_attrs(text: str) -> dict[str, str]:
    out = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if sep:
            out[key] = value
    return out


# ---------------------------------------------------------------------------
# Types and values
# ---------------------------------------------------------------------------

PG_EPOCH_DATE = dt.date(2000, 1, 1)
PG_EPOCH = dt.datetime(2000, 1, 1)
PG_EPOCH_TZ = dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc)


@dataclass(frozen=True)
class PgType:
    """A PostgreSQL type as a client sees it: OID, name, length (-1: variable)."""

    oid: int
    name: str
    typlen: int


BOOL = PgType(16, "bool", 1)
BYTEA = PgType(17, "bytea", -1)
INT8 = PgType(20, "int8", 8)
INT2 = PgType(21, "int2", 2)
INT4 = PgType(23, "int4", 4)
TEXT = PgType(25, "text", -1)
OID = PgType(26, "oid", 4)
JSON = PgType(114, "json", -1)
FLOAT4 = PgType(700, "float4", 4)
FLOAT8 = PgType(701, "float8", 8)
UNKNOWN = PgType(705, "unknown", -2)
VARCHAR = PgType(1043, "varchar", -1)
DATE = PgType(1082, "date", 4)
TIME = PgType(1083, "time", 8)
TIMESTAMP = PgType(1114, "timestamp", 8)
TIMESTAMPTZ = PgType(1184, "timestamptz", 8)
INTERVAL = PgType(1186, "interval", 16)
TIMETZ = PgType(1266, "timetz", 12)
NUMERIC = PgType(1700, "numeric", -1)
UUID = PgType(2950, "uuid", 16)

#: DuckDB logical type id (``DuckDBPyType.id``) -> the PostgreSQL type sent to clients.
#: Nested types (LIST, ARRAY, STRUCT, MAP, UNION) and anything not listed are sent as
#: ``text`` holding JSON.
DUCKDB_TO_PG: dict[str, PgType] = {
    "boolean": BOOL,
    "tinyint": INT2,
    "smallint": INT2,
    "integer": INT4,
    "bigint": INT8,
    "utinyint": INT2,
    "usmallint": INT4,
    "uinteger": INT8,
    "ubigint": NUMERIC,
    "hugeint": NUMERIC,
    "uhugeint": NUMERIC,
    "bignum": NUMERIC,
    "varint": NUMERIC,
    "decimal": NUMERIC,
    "float": FLOAT4,
    "double": FLOAT8,
    "varchar": VARCHAR,
    "blob": BYTEA,
    "date": DATE,
    "time": TIME,
    "time_ns": TIME,
    "time with time zone": TIMETZ,
    "timestamp": TIMESTAMP,
    "timestamp_s": TIMESTAMP,
    "timestamp_ms": TIMESTAMP,
    "timestamp_ns": TIMESTAMP,
    "timestamp with time zone": TIMESTAMPTZ,
    "interval": INTERVAL,
    "uuid": UUID,
    "enum": VARCHAR,
}


def pg_type_for_duckdb(duck_type: Any) -> PgType:
    """The PostgreSQL type for a DuckDB ``DuckDBPyType`` (from ``cursor.description``)."""
    if str(duck_type) == "JSON":
        return JSON
    return DUCKDB_TO_PG.get(getattr(duck_type, "id", ""), TEXT)


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return "\\x" + bytes(value).hex()
    if isinstance(value, decimal.Decimal):
        return float(value) if not value.is_finite() else str(value)
    return str(value)


def _format_float(value: float, single: bool = False) -> str:
    """Shortest text that reads back as the same float4/float8, as PostgreSQL 12+ prints it."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if single:
        target = struct.unpack("!f", struct.pack("!f", value))[0]
        for digits in range(1, 10):
            text = f"{value:.{digits}g}"
            try:
                if struct.unpack("!f", struct.pack("!f", float(text)))[0] == target:
                    return text
            except OverflowError:  # rounded past the float4 range
                continue
    text = repr(value)
    return text[:-2] if text.endswith(".0") else text


def _format_offset(offset: dt.timedelta | None) -> str:
    seconds = int(offset.total_seconds()) if offset is not None else 0
    sign = "-" if seconds < 0 else "+"
    seconds = abs(seconds)
    hours, rem = divmod(seconds, 3600)
    minutes, secs = divmod(rem, 60)
    out = f"{sign}{hours:02d}"
    if minutes or secs:
        out += f":{minutes:02d}"
    if secs:
        out += f":{secs:02d}"
    return out


def _format_interval(value: dt.timedelta) -> str:
    # PostgreSQL "postgres" IntervalStyle: "1 day 02:03:04.5", "-00:00:01".
    total_us = value // dt.timedelta(microseconds=1)
    days, rem_us = divmod(abs(total_us), 86_400_000_000)
    sign = "-" if total_us < 0 else ""
    hours, rem_us = divmod(rem_us, 3_600_000_000)
    minutes, rem_us = divmod(rem_us, 60_000_000)
    secs, micros = divmod(rem_us, 1_000_000)
    parts = []
    if days:
        parts.append(f"{sign}{days} day{'s' if days != 1 else ''}")
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    if micros:
        clock += f".{micros:06d}".rstrip("0")
    if rem_us or hours or minutes or not days:
        parts.append(f"{sign}{clock}")
    return " ".join(parts)


def encode_text(value: Any, pg_type: PgType, tz: dt.tzinfo | None = None) -> bytes:
    """A non-NULL value in PostgreSQL text format.

    ``tz`` is the session TimeZone used for ``timestamptz`` values.
    """
    if pg_type is BOOL:
        return b"t" if value else b"f"
    if pg_type is BYTEA:
        return b"\\x" + bytes(value).hex().encode("ascii")
    if isinstance(value, float):
        return _format_float(value, single=pg_type is FLOAT4).encode("ascii")
    if isinstance(value, decimal.Decimal):
        if value.is_nan():
            return b"NaN"
        if value.is_infinite():
            return b"Infinity" if value > 0 else b"-Infinity"
        return format(value, "f").encode("ascii")
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            if tz is not None:
                value = value.astimezone(tz)
            text = value.replace(tzinfo=None).isoformat(sep=" ") + _format_offset(value.utcoffset())
        else:
            text = value.isoformat(sep=" ")
        return text.encode("ascii")
    if isinstance(value, dt.time):
        if value.tzinfo is not None:
            return (value.replace(tzinfo=None).isoformat() + _format_offset(value.utcoffset())).encode("ascii")
        return value.isoformat().encode("ascii")
    if isinstance(value, dt.date):
        return value.isoformat().encode("ascii")
    if isinstance(value, dt.timedelta):
        return _format_interval(value).encode("ascii")
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, default=_json_default, ensure_ascii=False).encode("utf-8")
    if isinstance(value, (bytes, bytearray)):
        return b"\\x" + bytes(value).hex().encode("ascii")
    if isinstance(value, bool):
        return b"true" if value else b"false"
    return str(value).encode("utf-8")


def _numeric_binary(value: decimal.Decimal) -> bytes:
    """PostgreSQL's binary numeric: base-10000 digits, weight, sign, display scale."""
    if value.is_nan():
        return struct.pack("!hhHh", 0, 0, 0xC000, 0)
    if value.is_infinite():
        return struct.pack("!hhHh", 0, 0, 0xD000 if value > 0 else 0xF000, 0)
    exponent = value.as_tuple().exponent
    dscale = max(0, -exponent) if isinstance(exponent, int) else 0
    int_part, _, frac_part = format(value.copy_abs(), "f").partition(".")
    int_part = int_part.lstrip("0")
    int_part = "0" * (-len(int_part) % 4) + int_part
    frac_part = frac_part + "0" * (-len(frac_part) % 4)
    digits = int_part + frac_part
    groups = [int(digits[i : i + 4]) for i in range(0, len(digits), 4)]
    weight = len(int_part) // 4 - 1
    while groups and groups[0] == 0:
        groups.pop(0)
        weight -= 1
    while groups and groups[-1] == 0:
        groups.pop()
    if not groups:
        weight = 0
    header = struct.pack("!hhHh", len(groups), weight, 0x4000 if value < 0 else 0, dscale)
    return header + b"".join(struct.pack("!H", g) for g in groups)


def encode_binary(value: Any, pg_type: PgType) -> bytes:
    """A non-NULL value in PostgreSQL binary format (text bytes for text-like types)."""
    oid = pg_type.oid
    if oid == BOOL.oid:
        return b"\x01" if value else b"\x00"
    if oid == INT2.oid:
        return struct.pack("!h", value)
    if oid == INT4.oid:
        return struct.pack("!i", value)
    if oid == INT8.oid:
        return struct.pack("!q", value)
    if oid == FLOAT4.oid:
        return struct.pack("!f", value)
    if oid == FLOAT8.oid:
        return struct.pack("!d", value)
    if oid == NUMERIC.oid:
        return _numeric_binary(decimal.Decimal(value))
    if oid == BYTEA.oid:
        return bytes(value)
    if oid == DATE.oid:
        return struct.pack("!i", (value - PG_EPOCH_DATE).days)
    if oid == TIMESTAMP.oid:
        return struct.pack("!q", (value - PG_EPOCH) // dt.timedelta(microseconds=1))
    if oid == TIMESTAMPTZ.oid:
        return struct.pack("!q", (value - PG_EPOCH_TZ) // dt.timedelta(microseconds=1))
    if oid == TIME.oid:
        if isinstance(value, str):  # 24:00:00, which Python's time cannot hold, comes as text
            hours, minutes, seconds = value.split(":")
            return struct.pack("!q", round(((int(hours) * 60 + int(minutes)) * 60 + float(seconds)) * 1_000_000))
        return struct.pack("!q", ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond)
    if oid == INTERVAL.oid:
        return struct.pack("!qii", value.seconds * 1_000_000 + value.microseconds, value.days, 0)
    if oid == UUID.oid:
        return value.bytes if isinstance(value, uuid.UUID) else uuid.UUID(str(value)).bytes
    if oid in (TEXT.oid, VARCHAR.oid, JSON.oid):
        return encode_text(value, pg_type)
    raise ValueError(f"binary format is not supported for type {pg_type.name}")


#: Types whose values :func:`encode_binary` can write.
BINARY_RESULT_OIDS = frozenset(
    t.oid
    for t in (BOOL, INT2, INT4, INT8, FLOAT4, FLOAT8, NUMERIC, BYTEA, DATE, TIMESTAMP, TIMESTAMPTZ,
              TIME, INTERVAL, UUID, TEXT, VARCHAR, JSON)
)

_INT_OIDS = {INT2.oid, INT4.oid, INT8.oid, OID.oid}
_FLOAT_OIDS = {FLOAT4.oid, FLOAT8.oid}


def decode_parameter(data: bytes, type_oid: int, fmt: int) -> Any:
    """A Bind parameter as the Python value handed to DuckDB.

    Text-format parameters of unknown or textual type stay ``str`` so that
    DuckDB casts them like string literals (``calls >= '2'``); numbers,
    booleans and bytea are converted by their declared type. A value that
    does not decode raises ValueError.
    """
    try:
        return _decode_parameter(data, type_oid, fmt)
    except (struct.error, ArithmeticError, OverflowError, decimal.InvalidOperation) as e:
        raise ValueError(str(e) or type(e).__name__) from e


def _decode_parameter(data: bytes, type_oid: int, fmt: int) -> Any:
    if fmt == 0:
        text = data.decode("utf-8")
        if type_oid in _INT_OIDS:
            return int(text)
        if type_oid in _FLOAT_OIDS:
            return float(text)
        if type_oid == NUMERIC.oid:
            return decimal.Decimal(text)
        if type_oid == BOOL.oid:
            return text.strip().lower() in ("t", "true", "1", "y", "yes", "on")
        if type_oid == BYTEA.oid:
            return bytes.fromhex(text[2:]) if text.startswith("\\x") else data
        return text
    if type_oid == INT2.oid:
        return struct.unpack("!h", data)[0]
    if type_oid in (INT4.oid,):
        return struct.unpack("!i", data)[0]
    if type_oid == OID.oid:
        return struct.unpack("!I", data)[0]
    if type_oid == INT8.oid:
        return struct.unpack("!q", data)[0]
    if type_oid == FLOAT4.oid:
        return struct.unpack("!f", data)[0]
    if type_oid == FLOAT8.oid:
        return struct.unpack("!d", data)[0]
    if type_oid == BOOL.oid:
        return data != b"\x00"
    if type_oid == BYTEA.oid:
        return data
    if type_oid in (TEXT.oid, VARCHAR.oid, UNKNOWN.oid, JSON.oid, 0, 18, 19, 1042):
        return data.decode("utf-8")
    if type_oid == DATE.oid:
        return PG_EPOCH_DATE + dt.timedelta(days=struct.unpack("!i", data)[0])
    if type_oid == TIMESTAMP.oid:
        return PG_EPOCH + dt.timedelta(microseconds=struct.unpack("!q", data)[0])
    if type_oid == TIMESTAMPTZ.oid:
        return PG_EPOCH_TZ + dt.timedelta(microseconds=struct.unpack("!q", data)[0])
    if type_oid == UUID.oid:
        return uuid.UUID(bytes=data)
    if type_oid == NUMERIC.oid:
        return _decode_numeric_binary(data)
    raise ValueError(f"binary format is not supported for parameters of type OID {type_oid}")


def _decode_numeric_binary(data: bytes) -> decimal.Decimal:
    ndigits, weight, sign, dscale = struct.unpack("!hhHh", data[:8])
    if ndigits < 0 or dscale < 0 or len(data) != 8 + 2 * ndigits:
        raise ValueError(f"invalid binary numeric (ndigits {ndigits}, dscale {dscale}, {len(data)} bytes)")
    if sign == 0xC000:
        return decimal.Decimal("NaN")
    if sign in (0xD000, 0xF000):
        return decimal.Decimal("Infinity" if sign == 0xD000 else "-Infinity")
    digits = struct.unpack(f"!{ndigits}H", data[8 : 8 + 2 * ndigits])
    value = decimal.Decimal(0)
    for i, d in enumerate(digits):
        value += decimal.Decimal(d).scaleb(4 * (weight - i))
    if sign == 0x4000:
        value = -value
    return value.quantize(decimal.Decimal(1).scaleb(-dscale)) if dscale else value
