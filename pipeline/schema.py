"""The audit event as a Spark schema, built from the one field list in `minibroker.storage.audit_format`.

`AUDIT_SCHEMA` has exactly the event's fields (see `minibroker.storage.audit_format` for their meaning);
`EVENTS_SCHEMA` adds `seq`, the event's position in the stream it was read from (the record offset in
the audit topic; the row order of a trace), which breaks ties between events of the same `ts` the way
the broker ordered them.
"""

from __future__ import annotations

from pyspark.sql.types import (
    BooleanType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from minibroker.storage.audit_format import AUDIT_FIELDS

__all__ = ["AUDIT_SCHEMA", "EVENTS_SCHEMA", "SPARK_TYPES"]

SPARK_TYPES: dict[str, DataType] = {
    "long": LongType(),
    "int": IntegerType(),
    "string": StringType(),
    "boolean": BooleanType(),
}

# Every column is declared nullable: readers of JSON and Parquet traces cannot promise otherwise,
# and the contract's non-null fields are checked where it matters (the reader fills nothing in).
AUDIT_SCHEMA = StructType([StructField(name, SPARK_TYPES[kind], True) for name, kind, _ in AUDIT_FIELDS])
EVENTS_SCHEMA = StructType([*AUDIT_SCHEMA.fields, StructField("seq", LongType(), True)])
