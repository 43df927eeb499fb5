"""Errors nexusd and libnexus report: one class per nexus::ErrorCode, all under nexus.Error.

    try:
        client.sft_step(...)
    except nexus.BadBatch as e:      # shapes or numbers the head refuses
        print(e.code, e.value, e)    # "BadBatch", 19, "BadBatch: ..."

Where Python has a matching built-in, the class derives from it too (nexus.Timeout is a
TimeoutError, nexus.PermissionDenied a PermissionError, nexus.ConnectFailed and
nexus.DaemonGone ConnectionErrors), so generic handlers keep working.
"""
from __future__ import annotations


class Error(Exception):
    """A failure libnexus reports. `code` is the ErrorCode's name, `value` its number."""

    code = "Error"
    value = -1

    def __init__(self, value: int, message: str) -> None:
        super().__init__(message)
        self.value = value


# (name, number, extra built-in base): the numbering of schema/nexus.fbs ErrorCode and
# client/include/nexus/error.hpp. A test checks this table against the extension's.
_CODES = [
    ("BadMessage", 1, None), ("BadLengthPrefix", 2, None), ("RingCorrupt", 3, None),
    ("MessageTooLarge", 4, None), ("UnsupportedVersion", 5, None), ("WrongMessageType", 6, None),
    ("TensorOutOfBounds", 7, None), ("BadTensor", 8, None), ("PermissionDenied", 9, PermissionError),
    ("AlreadyAttached", 10, None), ("SegmentTooLarge", 11, None), ("TooManyTenants", 12, None),
    ("Busy", 13, None), ("WouldBlock", 14, BlockingIOError), ("Timeout", 15, TimeoutError),
    ("DaemonGone", 16, ConnectionError), ("Internal", 17, None), ("NotRegistered", 18, None),
    ("BadBatch", 19, ValueError), ("UnknownVersion", 20, None), ("UnknownSession", 21, None),
    ("EnvFailed", 22, None), ("JobFailed", 23, None), ("BadDataset", 24, None), ("OverBudget", 25, None),
    ("QuotaExceeded", 26, None), ("UnknownJob", 27, None), ("Cancelled", 28, None), ("UnknownRegion", 29, None),
    ("LimitExceeded", 30, None),
    ("ArenaFull", 1000, MemoryError), ("ConnectFailed", 1001, ConnectionError),
]

_BY_VALUE: dict[int, type[Error]] = {}
for _name, _value, _builtin in _CODES:
    _bases = (Error,) if _builtin is None else (Error, _builtin)
    _cls = type(_name, _bases, {"code": _name, "value": _value, "__module__": "nexus",
                                "__doc__": f"nexus::ErrorCode::{_name} ({_value})."})
    _BY_VALUE[_value] = _cls
    globals()[_name] = _cls
del _name, _value, _builtin, _bases, _cls

__all__ = ["Error", "error_class"] + [name for name, _, _ in _CODES]


def error_class(value: int) -> type[Error]:
    """The class for an ErrorCode number (Error itself for a number this package predates)."""
    return _BY_VALUE.get(value, Error)
