"""Native handles destroyed in dependency order, whatever order Python
collects the wrappers in.

A handle that others depend on (a host under its selections, a selection
under its bindings) counts its live dependents. Closing it, explicitly or
by collection, only marks it; the C object goes when the last dependent
has gone. The cyclic garbage collector may finalize a host before its
binding: the host then waits, and the binding's finalizer destroys both.
"""

from __future__ import annotations

import threading
from typing import Callable, Optional, Sequence

_lock = threading.RLock()


class Handle:
    """Owner of one C object and of a reference on each parent handle."""

    _ptr: Optional[int] = None
    _destroy: Optional[Callable[[int], None]] = None

    def _adopt(self, ptr: int, destroy: Callable[[int], None],
               parents: Sequence["Handle"] = ()) -> None:
        with _lock:
            self._ptr = ptr
            self._destroy = destroy
            self._parents = tuple(parents)
            self._children = 0
            self._closing = False
            for p in self._parents:
                p._children += 1

    @property
    def closed(self) -> bool:
        """True once close() was called (the C object may still wait for
        its dependents)."""
        return self._ptr is None or getattr(self, "_closing", True)

    def _handle(self) -> int:
        p = self._ptr
        if p is None or self._closing:
            raise ValueError(f"{type(self).__name__} is closed")
        return p

    def close(self) -> None:
        """Release the C object now, or as soon as the objects made from it
        are gone. Idempotent; the object is unusable afterwards."""
        with _lock:
            if self._ptr is None:
                return
            self._closing = True
            self._release()

    def _release(self) -> None:
        if self._ptr is None or not self._closing or self._children:
            return
        ptr, destroy = self._ptr, self._destroy
        self._ptr = None
        try:
            if destroy is not None:
                destroy(ptr)
        finally:
            for p in self._parents:
                p._children -= 1
                p._release()
            self._parents = ()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: nothing left to report to
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
