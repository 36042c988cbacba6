"""Errors raised by the attnhost package.

Every failure of a C call becomes an :class:`AttnhostError` carrying the
call's :class:`Status` and the library's message (which names the field and
the offending value). Each status has its own subclass, so callers may catch
``attnhost.InvalidArgumentError`` or test ``err.status``.
"""

from __future__ import annotations

import enum
from typing import Dict, Type


class Status(enum.IntEnum):
    """ah_status."""

    OK = 0
    INVALID_ARGUMENT = 1
    UNSUPPORTED = 2
    OUT_OF_MEMORY = 3
    DEVICE = 4
    UNAVAILABLE = 5
    ABI = 6
    CONFIG = 7
    IO = 8
    PLUGIN = 9
    NOT_FOUND = 10
    INTERNAL = 11


class AttnhostError(Exception):
    """A libattnhost call failed.

    Attributes:
        status: the :class:`Status` the call returned.
        message: the library's message (field, index and value of what was
            wrong).
    """

    status: Status = Status.INTERNAL

    def __init__(self, status: int, message: str) -> None:
        try:
            self.status = Status(status)
        except ValueError:
            self.status = Status.INTERNAL
        self.message = message
        super().__init__(f"{self.status.name.lower()}: {message}")


class InvalidArgumentError(AttnhostError, ValueError):
    """Bad input: a shape, dtype, range or pointer (AH_ERR_INVALID_ARGUMENT)."""


class UnsupportedError(AttnhostError):
    """A valid request the backend cannot serve (AH_ERR_UNSUPPORTED)."""


class OutOfMemoryError(AttnhostError, MemoryError):
    """AH_ERR_OUT_OF_MEMORY."""


class DeviceError(AttnhostError):
    """A driver or kernel failure (AH_ERR_DEVICE)."""


class UnavailableError(AttnhostError):
    """No usable device here (AH_ERR_UNAVAILABLE)."""


class AbiMismatchError(AttnhostError, ImportError):
    """The loaded library speaks another ABI major (AH_ERR_ABI)."""

    def __init__(self, message: str, status: int = Status.ABI) -> None:
        super().__init__(status, message)


class ConfigError(AttnhostError):
    """A bad configuration or model description (AH_ERR_CONFIG)."""


class IOError_(AttnhostError, OSError):
    """A file-system failure (AH_ERR_IO)."""


class PluginError(AttnhostError):
    """A plugin misbehaved (AH_ERR_PLUGIN)."""


class NotFoundError(AttnhostError, LookupError):
    """AH_ERR_NOT_FOUND."""


class InternalError(AttnhostError):
    """AH_ERR_INTERNAL."""


class LibraryNotFoundError(AttnhostError, ImportError):
    """libattnhost.so could not be loaded (no C status: reported as NOT_FOUND)."""

    def __init__(self, message: str) -> None:
        super().__init__(Status.NOT_FOUND, message)


_BY_STATUS: Dict[int, Type[AttnhostError]] = {
    Status.INVALID_ARGUMENT: InvalidArgumentError,
    Status.UNSUPPORTED: UnsupportedError,
    Status.OUT_OF_MEMORY: OutOfMemoryError,
    Status.DEVICE: DeviceError,
    Status.UNAVAILABLE: UnavailableError,
    Status.CONFIG: ConfigError,
    Status.IO: IOError_,
    Status.PLUGIN: PluginError,
    Status.NOT_FOUND: NotFoundError,
    Status.INTERNAL: InternalError,
}


def error_for(status: int, message: str) -> AttnhostError:
    """The exception for a failed call: the subclass of its status."""
    if status == Status.ABI:
        return AbiMismatchError(message)
    cls = _BY_STATUS.get(int(status), AttnhostError)
    return cls(status, message)
