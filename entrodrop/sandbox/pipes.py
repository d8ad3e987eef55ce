"""Pipes read and written by deadlines, for the two processes that talk over them: the
evaluation to its harness (``code_runner.Harness``) and the harness to its candidate
(``candidates.Candidate``). Neither ever waits on the other past a deadline: a line that does not
come in time, or comes too long, is an error the reader decides on."""

import os
import select
import time

OUTPUTS_LIMIT = 64 << 20  # bytes of outputs one job sends back
# The line a job's reply begins with once its program is loaded and its tests begin: the
# evaluation gives the rest of the job its tests' deadline from there (``code_runner.Harness.run``).
TESTS_BEGIN = b"tests begin"


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
