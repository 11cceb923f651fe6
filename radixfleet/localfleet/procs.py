"""Child processes with no leftovers: process groups, a kill on exit, on signals and at exit.

Every child starts in a session (and process group) of its own, so stopping it reaches whatever
it started too, and a terminal's Ctrl-C reaches only the parent, which then stops the children
in order. Four layers make sure nothing outlives the parent:

1. `Supervisor.stop`/`close`: SIGTERM to the group, a grace period, then SIGKILL;
2. `install_signal_handlers`: SIGTERM and SIGHUP unwind the parent like Ctrl-C does, so the
   `finally` blocks that call `close` run;
3. an `atexit` hook kills every group still alive when the interpreter exits;
4. on Linux, each child asks the kernel for SIGKILL when its parent dies (PR_SET_PDEATHSIG), the
   one layer that survives a SIGKILL of the parent.

Every child's environment carries `RADIXFLEET_FLEET_ID`, so a test can find any process a fleet
left behind, however it was reparented (`processes_with_marker`).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any

MARKER_ENV = "RADIXFLEET_FLEET_ID"
_PR_SET_PDEATHSIG = 1
_UNWIND_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@dataclass
class Child:
    """A started child: its name (for logs and errors), process and log file."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    _log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        """True until the process has exited (and is reaped)."""
        return self.popen.poll() is None

    def log_tail(self, chars: int = 2000) -> str:
        """The end of the child's output, for error messages."""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def signal_group(self, sig: int) -> None:
        """Send `sig` to the child's whole process group (it leads its own)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)


class Supervisor:
    """Starts children and guarantees they stop: explicitly, on signals, or at exit."""

    def __init__(self, *, marker: str) -> None:
        self.marker = marker
        self._children: list[Child] = []
        self._lock = threading.Lock()
        self._previous: dict[int, Any] = {}
        atexit.register(self._kill_all)

    def spawn(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_path: Path,
        env: dict[str, str] | None = None,
    ) -> Child:
        """Start `argv` in its own session, output to `log_path`."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = log_path.open("wb")
        environment = {**os.environ, **(env or {}), MARKER_ENV: self.marker}
        popen = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=environment,
            start_new_session=True,
            preexec_fn=_die_with_parent(os.getpid()),
        )
        child = Child(name=name, popen=popen, log_path=log_path, _log=log)
        with self._lock:
            self._children.append(child)
        return child

    def stop(self, child: Child, *, grace_s: float = 5.0) -> None:
        """SIGTERM the child's group, wait up to `grace_s`, then SIGKILL it; reap it."""
        self.stop_many([child], grace_s=grace_s)

    def stop_many(self, children: Sequence[Child], *, grace_s: float = 5.0) -> None:
        """Stop several children at once: one grace period for all of them."""
        for child in children:
            child.signal_group(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for child in children:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
        for child in children:
            # SIGKILL the group even when the leader exited: a straggler may remain in it.
            child.signal_group(signal.SIGKILL)
            child.popen.wait()
            self._forget(child)

    def close(self, *, grace_s: float = 5.0) -> None:
        """Stop every child still known, and put back the signal handlers."""
        with self._lock:
            children = list(self._children)
        self.stop_many(children, grace_s=grace_s)
        self.restore_signal_handlers()
        atexit.unregister(self._kill_all)

    def children(self) -> list[Child]:
        """Children started and not yet stopped."""
        with self._lock:
            return list(self._children)

    def install_signal_handlers(self) -> None:
        """Make SIGTERM and SIGHUP unwind the main thread (like Ctrl-C), so cleanups run.

        Only the main thread can install handlers; elsewhere this does nothing, and the atexit
        hook and the children's parent-death signal still stop everything.
        """
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in _UNWIND_SIGNALS:
            self._previous[sig] = signal.signal(sig, _raise_exit)

    def restore_signal_handlers(self) -> None:
        """Put back the handlers `install_signal_handlers` replaced."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()

    def _forget(self, child: Child) -> None:
        with self._lock:
            if child in self._children:
                self._children.remove(child)
        if child._log is not None:
            child._log.close()
            child._log = None

    def _kill_all(self) -> None:
        # At interpreter exit there is no time for grace: kill, then reap.
        for child in self.children():
            child.signal_group(signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.popen.wait(timeout=5)


def _raise_exit(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def _die_with_parent(parent_pid: int) -> Callable[[], None] | None:
    """A pre-exec hook asking Linux to SIGKILL the child when the parent dies."""
    if not sys.platform.startswith("linux"):
        return None
    # Resolved before fork, so the child only makes the call.
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    kill = int(signal.SIGKILL)

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, kill)
        if os.getppid() != parent_pid:  # the parent died before the call took effect
            os._exit(1)

    return hook


def processes_with_marker(marker: str) -> list[int]:
    """Pids of live processes whose environment carries `marker` (Linux /proc)."""
    needle = f"{MARKER_ENV}={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


async def stop_async(supervisor: Supervisor, child: Child, *, grace_s: float = 5.0) -> None:
    """`Supervisor.stop` for an event loop: polls instead of blocking while the child exits."""
    child.signal_group(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while child.alive() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    supervisor.stop(child, grace_s=0.0)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` right now (the kernel's pick)."""
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` different TCP ports free on `host` right now. Each socket stays bound until all
    are picked: two picks in a row, each closed at once, may be the same port (a CI run's smg
    was given one port for its HTTP and its metrics listener, and refused to start)."""
    with contextlib.ExitStack() as held:
        ports = []
        for _ in range(count):
            sock = held.enter_context(socket.socket())
            sock.bind((host, 0))
            ports.append(int(sock.getsockname()[1]))
        return ports
