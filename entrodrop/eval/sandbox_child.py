"""The child of ``entrodrop.eval.code_runner``: locks itself down, runs one model-written program on
its tests' inputs, and reports the raw outputs. It never sees an expected output, so it has no
verdict to forge: the parent, which the program never touches, compares.

Started as ``python -I sandbox_child.py <results fd>`` (a fresh interpreter, not a fork of the
process that holds the model) in an empty temporary directory with a scrubbed environment. It
reads the job (JSON) on stdin, then, before any model-written code runs:

1. rlimits: address space, CPU seconds, file size, open files and processes, and a seccomp
   filter that refuses a new process (fork fails, threads still start): root ignores the
   process limit, and the filter binds it too;
2. a user and network namespace: no network (``network: cut``), when the kernel lets an
   unprivileged process make one;
3. Landlock: no file outside the temporary directory can be written, truncated, removed or
   created (``files: confined``), when the kernel has it.

What it reports on the results fd, one JSON object: ``outputs`` (one a test, in order: stdout
text, or a return value encoded by ``encode``), ``error`` (why it stopped early) and what the
lock-down got (``network``, ``files``). Standard library only: it must not import the project.
"""

import ast
import ctypes
import io
import json
import os
import random
import resource
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


def encode(value, depth: int = 0):
    """``value`` as JSON that keeps its type: ``[tag, payload]``. Only the builtin types count
    (exactly: a subclass of int with its own ``__eq__`` is refused), so an object that claims to
    equal everything has no encoding and fails its test.

    Example:
        >>> encode((1, [2.5, "a"], {None: True}))
        ['tuple', [['int', 1], ['list', [['float', '2.5'], ['str', 'a']]], ['dict', [[['none', None], ['bool', True]]]]]]
    """
    kind = type(value)
    if depth > 100:
        raise ValueError("nested too deep")
    if kind in SCALARS:
        return [SCALARS[kind], repr(value) if kind is float else value]
    if kind in (list, tuple):
        return [kind.__name__, [encode(v, depth + 1) for v in value]]
    if kind in (set, frozenset):
        return ["set", sorted((encode(v, depth + 1) for v in value), key=json.dumps)]
    if kind is dict:
        return ["dict", sorted(([encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()), key=json.dumps)]
    raise TypeError(f"a {kind.__name__} is not a plain value")


# ------------------------------------------------------------------ lock-down

CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
SYS_LANDLOCK = {"create_ruleset": 444, "add_rule": 445, "restrict_self": 446}  # the same on x86-64 and arm64
# Landlock's file-system rights that change the file system (never the read rights).
WRITE_FILE, REMOVE_DIR, REMOVE_FILE = 1 << 1, 1 << 4, 1 << 5
MAKE_ANY = sum(1 << b for b in range(6, 13))  # char, dir, reg, sock, fifo, block, sym
REFER, TRUNCATE = 1 << 13, 1 << 14  # ABI 2, ABI 3


def cut_network(libc) -> str:
    """A user and a network namespace of this process alone: only a loopback that is down."""
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
        return "open"
    # The same ids inside, or files it creates would have no owner (EOVERFLOW).
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)
    return "cut"


def confine_files(libc, allowed_dir: str) -> str:
    """Landlock: writing, truncating, creating and removing files only beneath ``allowed_dir``."""
    abi = libc.syscall(SYS_LANDLOCK["create_ruleset"], None, 0, 1)
    if abi < 1:
        return "open"
    handled = WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_ANY | (REFER if abi >= 2 else 0) | (TRUNCATE if abi >= 3 else 0)
    ruleset_attr = ctypes.c_uint64(handled)
    ruleset = libc.syscall(SYS_LANDLOCK["create_ruleset"], ctypes.byref(ruleset_attr), ctypes.sizeof(ruleset_attr), 0)
    if ruleset < 0:
        return "open"

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    directory = os.open(allowed_dir, os.O_PATH | os.O_CLOEXEC)
    rule = PathBeneath(handled, directory)
    ok = (libc.syscall(SYS_LANDLOCK["add_rule"], ruleset, 1, ctypes.byref(rule), 0) == 0
          and libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
          and libc.syscall(SYS_LANDLOCK["restrict_self"], ruleset, 0) == 0)
    os.close(directory)
    os.close(ruleset)
    if not ok:
        raise OSError("Landlock refused the rules it accepted the ruleset for")
    return "confined"


# (audit arch, fork, vfork, clone, clone3) by machine; arm64 has no fork or vfork call.
SYSCALLS = {"x86_64": (0xC000003E, 57, 58, 56, 435), "aarch64": (0xC00000B7, None, None, 220, 435)}
CLONE_THREAD = 0x10000
EPERM, ENOSYS = 1, 38


def refuse_new_processes(libc) -> str:
    """A seccomp filter: ``fork``, ``vfork`` and a ``clone`` without ``CLONE_THREAD`` fail with
    EPERM; ``clone3`` says ENOSYS, so the C library starts threads with ``clone`` instead."""
    machine = os.uname().machine
    if machine not in SYSCALLS:
        return "allowed"
    arch, fork, vfork, clone, clone3 = SYSCALLS[machine]
    ld, jeq, jset, ret = 0x20, 0x15, 0x45, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_JMP|JSET|K, BPF_RET|K
    allow, refuse, absent = 0x7FFF0000, 0x00050000 | EPERM, 0x00050000 | ENOSYS
    program = [(ld, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, allow), (ld, 0, 0, 0),
               (jeq, 0, 1, clone3), (ret, 0, 0, absent)]
    for nr in (fork, vfork):
        if nr is not None:
            program += [(jeq, 0, 1, nr), (ret, 0, 0, refuse)]
    program += [(jeq, 0, 3, clone), (ld, 0, 0, 16), (jset, 1, 0, CLONE_THREAD), (ret, 0, 0, refuse),
                (ret, 0, 0, allow)]

    class Filter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]

    filters = (Filter * len(program))(*[Filter(*f) for f in program])
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(Program(len(program), filters)), 0, 0) != 0:
        return "allowed"
    return "refused"


def lock_down(limits: dict) -> dict:
    """Everything before the program runs (see the module's docstring); what it got."""
    libc = ctypes.CDLL(None, use_errno=True)
    # The limits first: a user namespace keeps the process limit its creator had when it was
    # made, so a limit set after it would still let one fork through.
    for name, value in (("RLIMIT_AS", limits["memory_bytes"]), ("RLIMIT_CPU", limits["cpu_s"]),
                        ("RLIMIT_FSIZE", limits["file_bytes"]), ("RLIMIT_NOFILE", limits["open_files"]),
                        ("RLIMIT_NPROC", 0)):
        resource.setrlimit(getattr(resource, name), (value, value))
    network = cut_network(libc)
    files = confine_files(libc, os.getcwd())
    return {"network": network, "files": files, "processes": refuse_new_processes(libc)}


# ------------------------------------------------------------------ running

def run_stdin(program, stdin: str) -> str:
    """The program as ``__main__`` with ``stdin``; what it printed (``sys.exit`` ends it early)."""
    saved = sys.stdin, sys.stdout
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin.encode()))
    sys.stdout = out = io.TextIOWrapper(io.BytesIO(), write_through=True)
    try:
        exec(program, {"__name__": "__main__"})
    except SystemExit:
        pass
    finally:
        sys.stdin, sys.stdout = saved
    return out.buffer.getvalue().decode(errors="replace")


def silently(fn, *args):
    """``fn(*args)`` with the program's prints thrown away."""
    saved, sys.stdout = sys.stdout, io.StringIO()
    try:
        return fn(*args)
    finally:
        sys.stdout = saved


def record_asserts(test_code: str) -> ast.Module:
    """``test_code`` with each ``assert a == b`` turned into ``__record__(a, b)`` and any other
    ``assert x`` into ``__record__(x)``: the values the assertions compare, for the parent to
    compare with a reference solution's, instead of a pass the program could fake."""

    class Recorder(ast.NodeTransformer):
        def visit_Assert(self, node: ast.Assert):
            test = node.test
            if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
                values = [test.left, test.comparators[0]]
            else:
                values = [test]
            call = ast.Call(func=ast.Name("__record__", ast.Load()), args=values, keywords=[])
            return ast.copy_location(ast.Expr(call), node)

    return ast.fix_missing_locations(Recorder().visit(ast.parse(test_code)))


def run_job(job: dict) -> tuple:
    """``(outputs, error)`` of one job: ``stdin`` (a stdout per input), ``functional`` (a return
    value per argument list, of ``Solution().<func_name>`` or the function) or ``asserts`` (the
    values each assertion of ``tests`` compares, then ``call``ed, e.g. ``check(candidate)``)."""
    outputs = []
    try:
        program = compile(PRELUDE + job["code"], "<solution>", "exec")
        if job["kind"] == "stdin":
            for stdin in job["inputs"]:
                outputs.append(run_stdin(program, stdin))
            return outputs, None
        namespace = {"__name__": "solution"}
        silently(exec, program, namespace)
        if job["kind"] == "functional":
            name = job["func_name"]
            fn = getattr(namespace["Solution"](), name) if "Solution" in namespace else namespace[name]
            for args in job["inputs"]:
                result = silently(fn, *args)
                outputs.append(encode(list(result) if type(result) is tuple else result))
            return outputs, None
        # ["eq", a, b] for an equality, ["is", x] for any other assertion
        namespace["__record__"] = lambda *values: outputs.append(["eq" if len(values) == 2 else "is",
                                                                  *map(encode, values)])
        random.seed(0)  # tests that draw random inputs draw the same ones for every solution
        silently(exec, compile(record_asserts(job["tests"]), "<tests>", "exec"), namespace)
        if job.get("call"):
            silently(exec, job["call"], namespace)
        return outputs, None
    except BaseException as e:  # noqa: BLE001 - the program's failure is its result, reported
        return outputs, f"{type(e).__name__}: {e}"[:500]


def main() -> None:
    results = os.fdopen(int(sys.argv[1]), "w")
    job = json.loads(sys.stdin.read())
    sys.stdin.close()
    report = lock_down(job["limits"])
    outputs, error = run_job(job)
    results.write(json.dumps({"outputs": outputs, "error": error, **report}))
    results.close()


if __name__ == "__main__":
    main()
