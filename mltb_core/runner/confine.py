"""File-system confinement of the solver process with Linux Landlock (direct syscalls, no dependency).

:func:`confine` restricts the calling process, and every process it starts later, to reading the
``read_only`` paths and reading and writing the ``read_write`` paths; every other file on the machine
becomes unreadable and unwritable for it (the held-out labels, other trials' sandboxes, the run
directory). It cannot be undone, so it is called only in a trial's tool worker (see
:mod:`mltb_core.runner.worker`), never in a pytest worker or the ``mltb`` command itself.

Landlock rules name directory trees (or single files); the kernel checks them on ``open`` and on
directory changes, whatever path the code used to get there (``..``, symlinks, ``/proc/self/fd``).
Network access is not handled: the solver reaches the LLM server over loopback TCP. Signals and
abstract unix sockets are scoped to the domain where the kernel supports it (ABI 6), so the solver
cannot signal the process that grades it.

Where Landlock is unavailable (not Linux, an old kernel, a seccomp policy that blocks the calls),
:func:`confine` restricts nothing, warns once per process on stderr and says why in the returned
status; the trial records it (``extra["confinement"]``).
"""
from __future__ import annotations

import ctypes
import errno
import os
import platform
import sys
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from mltb_core.bench.fixtures import FIXTURES

__all__ = ["ConfinementStatus", "confine", "landlock_abi", "system_read_paths",
           "python_read_paths", "SYSTEM_READ_WRITE"]

# Syscall numbers: the same on x86_64 and aarch64 (the generic table).
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# Access rights (include/uapi/linux/landlock.h), by the ABI that introduced them.
_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_REMOVE_DIR, _REMOVE_FILE, _MAKE_CHAR, _MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
_MAKE_REG, _MAKE_SOCK, _MAKE_FIFO, _MAKE_BLOCK, _MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
_REFER, _TRUNCATE, _IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15          # ABI 2, 3, 5
_ABI1_FS = (1 << 13) - 1
_FS_BY_ABI = {1: _ABI1_FS, 2: _ABI1_FS | _REFER, 3: _ABI1_FS | _REFER | _TRUNCATE,
              4: _ABI1_FS | _REFER | _TRUNCATE, 5: _ABI1_FS | _REFER | _TRUNCATE | _IOCTL_DEV}
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1       # ABI 6
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1                   # ABI 4
# Rights that make sense on a file (a rule on a file with directory rights is rejected).
_FILE_RIGHTS = _EXECUTE | _WRITE_FILE | _READ_FILE | _TRUNCATE | _IOCTL_DEV
_READ_RIGHTS = _EXECUTE | _READ_FILE | _READ_DIR

_SUPPORTED_ARCHS = ("x86_64", "aarch64", "arm64")


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


@dataclass(frozen=True)
class ConfinementStatus:
    """What :func:`confine` did: ``active`` with the Landlock ABI, or not and why."""

    active: bool
    abi: int = 0
    reason: str = ""
    skipped: tuple[str, ...] = field(default=())   # granted paths that do not exist (nothing to allow)

    @property
    def label(self) -> str:
        """``"landlock-abi7"`` or ``"none: <reason>"`` (what the trial record keeps)."""
        return f"landlock-abi{self.abi}" if self.active else f"none: {self.reason}"


_warned = False


def _warn_once(reason: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        print(f"mltb: warning: solver processes run WITHOUT file-system confinement ({reason}); "
              "a tool that escapes the expression evaluator could read the held-out labels", file=sys.stderr)


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def landlock_abi() -> tuple[int, str]:
    """``(abi, "")`` when Landlock is usable, else ``(0, reason)``."""
    if sys.platform != "linux":
        return 0, f"Landlock needs Linux (this is {sys.platform})"
    if platform.machine().lower() not in _SUPPORTED_ARCHS:
        return 0, f"Landlock syscall numbers unknown on {platform.machine()}"
    try:
        libc = _libc()
    except OSError as exc:
        return 0, f"libc not loadable: {exc}"
    abi = libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0),
                       ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION))
    if abi < 0:
        err = ctypes.get_errno()
        why = {errno.ENOSYS: "the kernel has no Landlock syscalls (older than 5.13, or blocked by seccomp)",
               errno.EOPNOTSUPP: "Landlock is built but disabled at boot (lsm= list)",
               errno.EPERM: "a seccomp policy forbids Landlock"}.get(err, os.strerror(err))
        return 0, why
    return int(abi), ""


def _rights_for(path: Path, rights: int) -> int:
    return rights & _FILE_RIGHTS if not path.is_dir() else rights


def confine(read_only: Iterable[str | os.PathLike], read_write: Iterable[str | os.PathLike],
            network: bool = True) -> ConfinementStatus:
    """Restrict this process (irrevocably) to reading ``read_only`` and reading/writing ``read_write``;
    with ``network=False`` also to no TCP bind or connect (Landlock ABI 4+).

    Paths that do not exist are skipped (listed in the status). Returns the status; never raises
    for an unavailable Landlock (it warns once per process instead). Raises ``OSError`` when a
    rule cannot be added on a kernel that has Landlock: a half-built sandbox must not pass for one.
    """
    abi, reason = landlock_abi()
    if not abi:
        _warn_once(reason)
        return ConfinementStatus(False, 0, reason)
    libc = _libc()
    handled = _FS_BY_ABI.get(abi, _FS_BY_ABI[5])
    # Handled network rights with no rule allowing any port: every TCP bind and connect is refused.
    net = _NET_BIND_TCP | _NET_CONNECT_TCP if not network and abi >= 4 else 0
    attr = _RulesetAttr(handled, net, (_SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL) if abi >= 6 else 0)
    ruleset = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)),
                           ctypes.c_uint32(0))
    if ruleset < 0:
        err = ctypes.get_errno()
        reason = f"landlock_create_ruleset failed: {os.strerror(err)}"
        _warn_once(reason)
        return ConfinementStatus(False, abi, reason)
    skipped: list[str] = []
    try:
        grants = [(p, handled & _READ_RIGHTS) for p in read_only] + [(p, handled) for p in read_write]
        for raw, rights in grants:
            path = Path(raw)
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except FileNotFoundError:
                skipped.append(str(path))
                continue
            try:
                rule = _PathBeneathAttr(_rights_for(path, rights), fd)
                if libc.syscall(_SYS_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_LANDLOCK_RULE_PATH_BENEATH),
                                ctypes.byref(rule), ctypes.c_uint32(0)) < 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"landlock_add_rule({path}): {os.strerror(err)}")
            finally:
                os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(err)}")
        if libc.syscall(_SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"landlock_restrict_self: {os.strerror(err)}")
    finally:
        os.close(ruleset)
    return ConfinementStatus(True, abi, "", tuple(skipped))


# ------------------------------------------------------------------ what a Python process needs to read
_SYSTEM_READ = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc",
                "/proc/self", "/proc/thread-self", "/proc/meminfo", "/proc/cpuinfo", "/proc/stat", "/proc/sys/kernel",
                "/sys/devices/system/cpu", "/sys/fs/cgroup")
# Device files a library may open for writing (subprocess.DEVNULL, logging to /dev/null).
SYSTEM_READ_WRITE = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random", "/dev/tty")


def system_read_paths() -> list[str]:
    """Read-only system locations shared libraries, locale, TLS roots and CPU counting need."""
    # "/proc/self" stays a link: confine() opens it in the confined process, whose /proc/<pid> it names.
    return list(_SYSTEM_READ)


def python_read_paths(modules: Iterable[object] | None = None) -> list[str]:
    """The Python installation and the directories of imported top-level packages outside it.

    Only package directories, never a ``sys.path`` entry as a whole: a source checkout on
    ``sys.path`` may also hold data caches (a split cache under the working tree).
    """
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        with_path = sysconfig.get_paths().get(key)
        if with_path:
            roots.add(with_path)
    try:
        import site

        roots.update(site.getsitepackages())
        roots.add(site.getusersitepackages())
    except (ImportError, AttributeError):
        pass
    for module in list(modules if modules is not None else sys.modules.values()):
        file = getattr(module, "__file__", None)
        name = getattr(module, "__name__", "") or ""
        if not file or "." in name:
            continue
        path = Path(file).resolve()
        # A package's directory, or a single-file module itself.
        roots.add(str(path.parent if path.name == "__init__.py" else path))
    # An installed mltb keeps its bundled data (raw rows, held-out labels included) in site-packages,
    # which is read as a whole: keep that one directory out.
    return _excluding(_outermost(r for r in roots if r), FIXTURES)


def _excluding(paths: Iterable[str], hidden: Path) -> list[str]:
    """``paths`` with ``hidden`` left out: Landlock only grants, so a granted directory holding
    ``hidden`` is replaced by its entries, down the branch that leads to ``hidden``. Paths are
    resolved first: Landlock follows links (a venv's ``lib64 -> lib`` grants ``lib``)."""
    hidden = hidden.resolve()
    kept: list[str] = []
    expanded: set[Path] = set()
    pending = [Path(p) for p in paths]
    while pending:
        root = pending.pop().resolve()
        if root.is_relative_to(hidden):
            continue
        if not hidden.is_relative_to(root):
            kept.append(str(root))
        elif root not in expanded:   # a link back to an ancestor must not loop
            expanded.add(root)
            pending.extend(root.iterdir())
    return _outermost(kept)


def _outermost(paths: Iterable[str]) -> list[str]:
    """The paths not inside another of them (a rule on a directory covers everything below it)."""
    kept: list[str] = []
    for path in sorted({os.path.normpath(p) for p in paths}):
        if not any(path == k or path.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(path)
    return kept
