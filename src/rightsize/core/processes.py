"""Child processes that never outlive their parent (node processes, tuning pool workers)."""

from __future__ import annotations

import ctypes
import os
import signal
import sys

#: Linux ``prctl`` option: the signal a process gets when its parent dies.
_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGKILL this process when its parent dies; exit at once if it already has
    (the parent died before the request took effect: the process was reparented)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:
        os._exit(1)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one of another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
