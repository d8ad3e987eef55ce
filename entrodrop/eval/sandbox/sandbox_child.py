"""The candidate process of ``entrodrop.eval.sandbox``: the only place model-written code runs.

It holds the program and nothing else: no test, no expected output, no reference solution, no
verdict. The trusted harness (``code_harness``) reaches it only through remote calls on two
pipes, one JSON object a line, each request numbered and each reply carrying its number:

- ``{"id", "op": "load", "code", "main", "cpu_s"}``: compile the program; unless ``main`` (a
  stdin program, run once per input), run its module code. Reply ``{"id", "ok": null}``;
- ``{"id", "op": "call", "name", "args", "kwargs", "solution"}``: call a function of the program
  (``solution``: a method of one ``Solution()``, LiveCodeBench's form) with arguments encoded by
  ``encode``. Reply ``{"id", "ok": <encoded return value>}``;
- ``{"id", "op": "stdin", "input"}``: run the program as ``__main__`` on that input (``input()``,
  ``sys.stdin``, ``open(0)``). Reply ``{"id", "ok": <what it printed>}``;
- any failure: ``{"id", "error": "<type>: <message>"}``; when a called function of the program
  raised an exception of a type in ``RAISABLE``, also ``"raised": "<its type's name>"``, which
  the harness raises in the test (a test that expects ``ValueError`` sees one).

Started as ``python -I -S -B sandbox_child.py <config JSON>`` by the harness, either inside
bubblewrap (which brings the namespaces, the read-only file system and this module's seccomp
filter), or alone, when bubblewrap cannot run here: then ``lock_down`` applies the project's own
layer (namespaces where the kernel allows them, Landlock for reads and writes, the same seccomp
filter, signals only to itself). Before any model-written code: rlimits, the protocol moved to
private descriptors and 0, 1, 2 pointed at ``/dev/null`` (a stray ``print`` cannot garble a
reply), then one ready line. Standard library only: inside bubblewrap it can read the
interpreter's standard library and this file, nothing of the project.
"""

import builtins
import ctypes
import io
import json
import os
import resource
import struct
import sys

PRELUDE = """\
import bisect, collections, functools, heapq, itertools, math, operator, random, re, string, sys
from bisect import bisect_left, bisect_right, insort
from collections import Counter, OrderedDict, defaultdict, deque
from functools import cache, lru_cache, reduce
from heapq import heapify, heappop, heappush, heappushpop, nlargest, nsmallest
from itertools import accumulate, combinations, count, permutations, product
from math import comb, factorial, gcd, inf, isqrt, lcm, log, log2, sqrt
from typing import *
sys.setrecursionlimit(100000)
"""

# ------------------------------------------------------------------ values, by type

SCALARS = {type(None): "none", bool: "bool", int: "int", float: "float", str: "str"}
MAX_DEPTH = 100
# Ints past 64 bits travel as hex text: Python refuses decimal conversions past 4,300 digits.
BIG_INT = 1 << 63
# The built-in exceptions a called function may raise back into the test (``"raised"``); any
# other (the program's own classes, SystemExit, MemoryError...) fails the sample as before.
RAISABLE = frozenset(["Exception", "ArithmeticError", "AttributeError", "IndexError", "KeyError", "LookupError",
                      "NotImplementedError", "OverflowError", "RuntimeError", "TypeError", "ValueError",
                      "ZeroDivisionError"])


class Instance:
    """A test's ``Pair(5, 24)`` for a class of the reference solution, as the harness records
    it: the class's name and its constructor's arguments. Only the harness encodes one
    (``encode(..., instances=True)``, tag ``object``); the candidate rebuilds it with the
    program's own class of that name (``decode(..., build=...)``), as the test run in the
    program's process would have called it."""

    __slots__ = ("name", "args", "kwargs")

    def __init__(self, name: str, args: tuple, kwargs: dict):
        self.name, self.args, self.kwargs = name, args, kwargs

    def __repr__(self) -> str:
        return f"{self.name}(...)"


def encode(value, depth: int = 0, instances: bool = False):
    """``value`` as JSON that keeps its type: ``[tag, payload]``. Only the builtin types count
    (exactly: a subclass of int with its own ``__eq__`` is refused), so an object that claims to
    equal everything has no encoding and fails its test. Floats travel as ``repr`` (``nan``,
    ``inf`` included), ints past 64 bits as hex text, a set's items sorted, a dict's in order.
    With ``instances`` (the harness's side only), an ``Instance`` travels as
    ``["object", [name, [args], [[key, value]]]]``.

    Example:
        >>> encode((1, [2.5, "a"], {None: True}))
        ['tuple', [['int', 1], ['list', [['float', '2.5'], ['str', 'a']]], ['dict', [[['none', None], ['bool', True]]]]]]
        >>> encode(-(1 << 70))
        ['int', '-0x400000000000000000']
    """
    kind = type(value)
    if depth > MAX_DEPTH:
        raise ValueError("nested too deep")
    if kind is int and not -BIG_INT <= value < BIG_INT:
        return ["int", hex(value)]
    if kind in SCALARS:
        return [SCALARS[kind], repr(value) if kind is float else value]
    if kind in (list, tuple):
        return [kind.__name__, [encode(v, depth + 1, instances) for v in value]]
    if kind in (set, frozenset):
        return ["set", sorted((encode(v, depth + 1, instances) for v in value), key=json.dumps)]
    if kind is dict:
        # In its order: a program may depend on it (HumanEval/95 looks at the first key).
        return ["dict", [[encode(k, depth + 1, instances), encode(v, depth + 1, instances)] for k, v in value.items()]]
    if kind is Instance and instances:
        return ["object", [value.name, [encode(v, depth + 1, True) for v in value.args],
                           [[k, encode(v, depth + 1, True)] for k, v in value.kwargs.items()]]]
    raise TypeError(f"a {kind.__name__} is not a plain value")


def decode(encoded, depth: int = 0, hashable: bool = False, build=None):
    """The value ``encode`` made, or ``ValueError`` for anything else (a wrong tag, payload or
    nesting past 100 levels): what arrives over a pipe is checked before it is used. A set
    inside a set or a dict key comes back as a frozenset. An ``object`` value is
    ``build(name, args, kwargs)`` where ``build`` is given (the candidate's side), else refused:
    the harness never takes one from the program.

    Example:
        >>> decode(encode((1, {2.5}, -(1 << 70)))) == (1, {2.5}, -(1 << 70))
        True
    """
    if depth > MAX_DEPTH:
        raise ValueError("nested too deep")
    if type(encoded) is not list or len(encoded) != 2 or type(encoded[0]) is not str:
        raise ValueError("not a [tag, payload] pair")
    tag, payload = encoded
    kind = type(payload)
    if tag == "none" and payload is None:
        return None
    if (tag == "bool" and kind is bool) or (tag == "str" and kind is str):
        return payload
    if tag == "int" and kind is int:
        return payload
    if tag == "int" and kind is str and 2 < len(payload) and payload.lstrip("-")[:2] == "0x":
        return int(payload, 16)
    if tag == "float" and kind is str and len(payload) <= 32:
        return float(payload)
    if tag in ("list", "tuple", "set", "dict") and kind is list:
        if tag == "dict":
            pairs = []
            for pair in payload:
                if type(pair) is not list or len(pair) != 2:
                    raise ValueError("a dict item is not a pair")
                pairs.append((decode(pair[0], depth + 1, True, build), decode(pair[1], depth + 1, False, build)))
            try:
                return dict(pairs)
            except TypeError as e:
                raise ValueError(str(e)) from None
        items = [decode(v, depth + 1, hashable or tag == "set", build) for v in payload]
        if tag == "list":
            return items
        if tag == "tuple":
            return tuple(items)
        try:
            return frozenset(items) if hashable else set(items)
        except TypeError as e:
            raise ValueError(str(e)) from None
    if tag == "object" and build is None:
        raise ValueError("an object of a class, which only the harness may send")
    if tag == "object" and kind is list and len(payload) == 3:
        name, args, kwargs = payload
        if (type(name) is str and name.isidentifier() and type(args) is list and type(kwargs) is list
                and all(type(p) is list and len(p) == 2 and type(p[0]) is str for p in kwargs)):
            return build(name, [decode(v, depth + 1, False, build) for v in args],
                         {k: decode(v, depth + 1, False, build) for k, v in kwargs})
    raise ValueError(f"a malformed {tag[:20]!r} value")


# ------------------------------------------------------------------ the seccomp filter

# System call numbers: (x86-64, arm64); None where the machine has no such call. Checked against
# the kernel headers (asm/unistd_64.h, asm-generic/unistd.h).
SYSCALLS = {
    "fork": (57, None), "vfork": (58, None), "clone": (56, 220), "clone3": (435, 435),
    "kill": (62, 129), "tkill": (200, 130), "tgkill": (234, 131), "rt_sigqueueinfo": (129, 138),
    "rt_tgsigqueueinfo": (297, 240), "pidfd_send_signal": (424, 424), "pidfd_open": (434, 434),
    "pidfd_getfd": (438, 438), "process_madvise": (440, 440), "process_mrelease": (448, 448), "kcmp": (312, 272),
    "ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271),
    "kexec_load": (246, 104), "kexec_file_load": (320, 294), "bpf": (321, 280), "perf_event_open": (298, 241),
    "userfaultfd": (323, 282), "add_key": (248, 217), "request_key": (249, 218), "keyctl": (250, 219),
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
    "unshare": (272, 97), "setns": (308, 268), "mount": (165, 40), "umount2": (166, 39),
    "pivot_root": (155, 41), "chroot": (161, 51), "open_tree": (428, 428), "move_mount": (429, 429),
    "fsopen": (430, 430), "fsconfig": (431, 431), "fsmount": (432, 432), "fspick": (433, 433),
    "mount_setattr": (442, 442), "personality": (135, 92), "acct": (163, 89), "swapon": (167, 224),
    "swapoff": (168, 225), "reboot": (169, 142), "init_module": (175, 105), "finit_module": (313, 273),
    "delete_module": (176, 106), "quotactl": (179, 60), "syslog": (103, 116),
    "name_to_handle_at": (303, 264), "open_by_handle_at": (304, 265),
    "socket": (41, 198), "msgget": (68, 186), "semget": (64, 190), "shmget": (29, 194), "mq_open": (240, 180),
    "chmod": (90, None), "fchmod": (91, 52), "fchmodat": (268, 53), "fchmodat2": (452, 452),
    "chown": (92, None), "fchown": (93, 55), "lchown": (94, None), "fchownat": (260, 54),
    "utime": (132, None), "utimes": (235, None), "futimesat": (261, None), "utimensat": (280, 88),
    "setxattr": (188, 5), "lsetxattr": (189, 6), "fsetxattr": (190, 7), "removexattr": (197, 14),
    "lremovexattr": (198, 15), "fremovexattr": (199, 16), "setxattrat": (463, 463), "removexattrat": (466, 466),
}
MACHINES = {"x86_64": (0, 0xC000003E), "aarch64": (1, 0xC00000B7)}  # column above, audit arch
# Refused with EPERM. A new process (fork, vfork, clone without CLONE_THREAD) is refused below;
# clone3 says ENOSYS, so the C library starts threads with clone, whose flags the filter can read.
# socket: no network and no Unix socket (socketpair stays: asyncio needs it); the IPC calls: no
# System V or POSIX queue or segment; the chmod/chown/utime/xattr calls: no metadata change, here
# or outside.
REFUSED = [name for name in SYSCALLS if name not in ("clone", "clone3", "kill", "tgkill", "rt_sigqueueinfo",
                                                     "rt_tgsigqueueinfo")]
# Signals, with no PID namespace around the program: only to itself (arg 0 is the target process).
SIGNALS_TO_SELF = ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo")
CLONE_THREAD, X32_SYSCALL_BIT = 0x10000, 0x40000000
LD, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ/JGE/JSET|K, BPF_RET|K
ALLOW, KILL, EPERM, ENOSYS = 0x7FFF0000, 0x80000000, 0x00050001, 0x00050026
NR, ARCH, ARG0 = 0, 4, 16  # offsets in struct seccomp_data


def seccomp_program(machine: str, own_pid=None) -> list:
    """The filter, as ``(code, jt, jf, k)`` BPF instructions: a call under any other
    architecture (i386's ``int 0x80`` on x86-64) or x32's numbering kills the process, the
    ``REFUSED`` calls fail with EPERM, a new process too (threads still start), and with
    ``own_pid`` the signal calls reach only that process.

    Example:
        >>> program = seccomp_program("x86_64")
        >>> program[:3] == [(LD, 0, 0, ARCH), (JEQ, 1, 0, 0xC000003E), (RET, 0, 0, KILL)]
        True
    """
    column, audit_arch = MACHINES[machine]
    number = {name: numbers[column] for name, numbers in SYSCALLS.items() if numbers[column] is not None}
    program = [(LD, 0, 0, ARCH), (JEQ, 1, 0, audit_arch), (RET, 0, 0, KILL), (LD, 0, 0, NR)]
    if machine == "x86_64":
        program += [(JGE, 0, 1, X32_SYSCALL_BIT), (RET, 0, 0, KILL)]
    program += [(JEQ, 0, 1, number["clone3"]), (RET, 0, 0, ENOSYS)]
    for name in REFUSED:
        if name in number:
            program += [(JEQ, 0, 1, number[name]), (RET, 0, 0, EPERM)]
    if own_pid is not None:
        for name in SIGNALS_TO_SELF:
            program += [(JEQ, 0, 4, number[name]), (LD, 0, 0, ARG0), (JEQ, 1, 0, own_pid), (RET, 0, 0, EPERM),
                        (RET, 0, 0, ALLOW)]
    program += [(JEQ, 0, 3, number["clone"]), (LD, 0, 0, ARG0), (JSET, 1, 0, CLONE_THREAD), (RET, 0, 0, EPERM),
                (RET, 0, 0, ALLOW)]
    return program


def seccomp_bytes(program: list) -> bytes:
    """The program as the kernel and bubblewrap's ``--seccomp FD`` read it (``struct sock_filter[]``)."""
    return b"".join(struct.pack("=HBBI", *instruction) for instruction in program)


PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER, PR_SET_PDEATHSIG = 38, 22, 2, 1


def install_seccomp(libc, program: list) -> None:
    """Apply ``program`` to this process and every thread it starts later."""
    data = seccomp_bytes(program)

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    if (libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
            or libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(Program(len(program), data)), 0, 0) != 0):
        raise OSError(ctypes.get_errno(), "the kernel refused the seccomp filter")


# ------------------------------------------------------------------ the project's own layer

CLONE_NEWUSER, CLONE_NEWNET, CLONE_NEWIPC = 0x10000000, 0x40000000, 0x08000000
SYS_LANDLOCK = {"create_ruleset": 444, "add_rule": 445, "restrict_self": 446}  # the same on x86-64 and arm64
# Landlock's file-system rights.
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR, REMOVE_DIR, REMOVE_FILE = (1 << b for b in range(6))
MAKE_ANY = sum(1 << b for b in range(6, 13))  # char, dir, reg, sock, fifo, block, sym
REFER, TRUNCATE = 1 << 13, 1 << 14  # ABI 2, ABI 3
READ = EXECUTE | READ_FILE | READ_DIR


def cut_namespaces(libc) -> str:
    """A user, network and IPC namespace of this process alone: no network (a loopback that is
    down), no abstract Unix socket outside, no System V object that outlives it."""
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWIPC) != 0:
        return "open"
    # The same ids inside, or files it creates would have no owner (EOVERFLOW); the network is
    # cut either way.
    try:
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    except OSError:
        pass
    return "cut"


def confine_files(libc, readable: dict, writable: str) -> str:
    """Landlock: read only beneath ``readable`` (its ``paths``: the system's shared libraries,
    this file...; what its ``stdlib`` directories hold but their ``except``: site-packages) and
    ``writable``; write, create, remove only beneath ``writable``."""
    abi = libc.syscall(SYS_LANDLOCK["create_ruleset"], None, 0, 1)
    if abi < 1:
        return "open"
    changes = WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_ANY | (REFER if abi >= 2 else 0) | (TRUNCATE if abi >= 3 else 0)
    handled = READ | changes
    ruleset_attr = ctypes.c_uint64(handled)
    ruleset = libc.syscall(SYS_LANDLOCK["create_ruleset"], ctypes.byref(ruleset_attr), ctypes.sizeof(ruleset_attr), 0)
    if ruleset < 0:
        return "open"

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    file_rights = EXECUTE | READ_FILE | WRITE_FILE | (TRUNCATE if abi >= 3 else 0)  # what a non-directory takes
    rules = [(path, READ) for path in readable["paths"]]
    for directory in readable["stdlib"]:  # entry by entry, so a package installed there stays unread
        rules += [(directory, READ_DIR)] + [(os.path.join(directory, name), READ) for name in os.listdir(directory)
                                            if name not in readable["except"]]
    rules += [(writable, handled), ("/dev/null", READ_FILE | WRITE_FILE | TRUNCATE)]
    ok = True
    for path, rights in rules:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue  # not on this machine
        if not os.path.isdir(path):
            rights &= file_rights
        ok &= libc.syscall(SYS_LANDLOCK["add_rule"], ruleset, 1, ctypes.byref(PathBeneath(rights, fd)), 0) == 0
        os.close(fd)
    ok = ok and libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 and libc.syscall(SYS_LANDLOCK["restrict_self"], ruleset, 0) == 0
    os.close(ruleset)
    if not ok:
        raise OSError("Landlock refused the rules it accepted the ruleset for")
    return "confined"


def lock_down(config: dict) -> str:
    """The project's own layer, for where bubblewrap cannot run: die with the harness, the
    namespaces it may make, Landlock, then the seccomp filter with signals only to itself."""
    libc = ctypes.CDLL(None, use_errno=True)
    network = cut_namespaces(libc)
    # SIGKILL when the harness dies (set after the new credentials, which would clear it) ...
    libc.prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0)
    if os.getppid() != config["harness_pid"]:  # ... which may have happened already
        os._exit(1)
    files = confine_files(libc, config["readable"], os.getcwd())
    install_seccomp(libc, seccomp_program(os.uname().machine, own_pid=os.getpid()))
    return f"own layer (network {network}, files {files}, processes refused)"


# ------------------------------------------------------------------ serving

def limit(name: str, value: int) -> None:
    resource.setrlimit(getattr(resource, name), (value, value))


def quietly(fn, *args, **kwargs):
    """``fn`` with the program's prints thrown away and an empty stdin."""
    saved = sys.stdout, sys.stdin
    sys.stdout, sys.stdin = io.StringIO(), io.StringIO()
    try:
        return fn(*args, **kwargs)
    finally:
        sys.stdout, sys.stdin = saved


def as_stdin(fd: int) -> None:
    """Make ``fd`` descriptor 0. A program may have closed descriptor 0 (``open(0).read()``
    closes it once read), so the new ``fd`` may already be 0: it is then kept, not closed."""
    if fd != 0:
        os.dup2(fd, 0)
        os.close(fd)


def run_stdin(program, stdin: str) -> str:
    """The program as ``__main__`` reading ``stdin`` (through ``sys.stdin`` and descriptor 0);
    what it printed (``sys.exit`` ends it early). Each run gets its input afresh, whatever the
    run before did to descriptor 0."""
    data = stdin.encode()
    memory = os.memfd_create("stdin")
    os.write(memory, data)
    os.lseek(memory, 0, os.SEEK_SET)
    as_stdin(memory)
    saved = sys.stdin, sys.stdout
    sys.stdin = io.TextIOWrapper(io.BytesIO(data))
    sys.stdout = out = io.TextIOWrapper(io.BytesIO(), write_through=True)
    try:
        exec(program, {"__name__": "__main__"})
    except SystemExit:
        pass
    finally:
        sys.stdin, sys.stdout = saved
        as_stdin(os.open(os.devnull, os.O_RDONLY))
    return out.buffer.getvalue().decode(errors="replace")


class NotBuilt(Exception):
    """An object the tests build could not be made from the program's class."""


class Raised(Exception):
    """The called function raised ``error``, a built-in exception in ``RAISABLE``."""

    def __init__(self, error: BaseException):
        super().__init__(f"{type(error).__name__}: {error}")
        self.name = type(error).__name__


class Program:
    """The loaded program and the requests it answers."""

    def __init__(self):
        self.code = None
        self.namespace = {"__name__": "__main__"}
        self.solution = None

    def load(self, request: dict):
        limit("RLIMIT_CPU", request["cpu_s"])
        self.code = compile(PRELUDE + request["code"], "<solution>", "exec")
        if not request["main"]:
            quietly(exec, self.code, self.namespace)

    def call(self, request: dict):
        if request["solution"] and "Solution" in self.namespace:
            if self.solution is None:
                self.solution = quietly(self.namespace["Solution"])
            fn = getattr(self.solution, request["name"])
        else:
            fn = self.namespace[request["name"]]
        args = [decode(a, build=self.build) for a in request["args"]]
        kwargs = {k: decode(v, build=self.build) for k, v in request["kwargs"]}
        try:
            value = quietly(fn, *args, **kwargs)
        except Exception as e:
            # Only the program's own call, and only an exception of the built-in type itself:
            # a missing function or class above stays a failure, whatever the test catches.
            name = type(e).__name__
            if not request["solution"] and name in RAISABLE and type(e) is getattr(builtins, name):
                raise Raised(e) from None
            raise
        return encode(value)

    def build(self, name: str, args: list, kwargs: dict):
        """The test's ``name(*args, **kwargs)`` with the program's own class of that name."""
        cls = self.namespace.get(name)
        if not isinstance(cls, type):
            raise NotBuilt(f"the program defines no class {name}, which the tests build")
        try:
            return quietly(cls, *args, **kwargs)
        except Exception as e:
            raise NotBuilt(f"the program's {name}(...) raised {type(e).__name__}: {e}") from None

    def stdin(self, request: dict) -> str:
        return run_stdin(self.code, request["input"])


OPS = {"load": Program.load, "call": Program.call, "stdin": Program.stdin}


def main() -> None:
    config = json.loads(sys.argv[1])
    for name, key in (("RLIMIT_AS", "memory_bytes"), ("RLIMIT_FSIZE", "file_bytes"), ("RLIMIT_NOFILE", "open_files")):
        limit(name, config[key])
    limit("RLIMIT_CORE", 0)
    # The protocol on private descriptors; 0, 1 and 2 on /dev/null.
    requests, replies = os.fdopen(os.dup(0), "r", encoding="utf-8"), os.fdopen(os.dup(1), "w", encoding="utf-8")
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    sandbox = "bubblewrap" if config["mode"] == "bubblewrap" else lock_down(config)
    replies.write(json.dumps({"id": 0, "ok": sandbox}) + "\n")
    replies.flush()
    program = Program()
    for line in requests:
        request = json.loads(line)
        try:
            reply = {"id": request["id"], "ok": OPS[request["op"]](program, request)}
        except Raised as e:
            reply = {"id": request["id"], "error": str(e)[:500], "raised": e.name}
        except BaseException as e:  # noqa: BLE001 - the program's failure is its result
            reply = {"id": request["id"], "error": f"{type(e).__name__}: {e}"[:500]}
        try:
            text = json.dumps(reply)
        except (TypeError, ValueError) as e:  # e.g. an unpaired surrogate in printed text
            text = json.dumps({"id": reply["id"], "error": f"{type(e).__name__}: {e}"[:500]})
        replies.write(text + "\n")
        replies.flush()


if __name__ == "__main__":
    main()
