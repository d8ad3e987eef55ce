"""The base class of the errors a user can fix: a wrong config value, a mismatched store or
cache, an output directory that holds another run, a damaged checkpoint, a corpus that cannot
be read. Each message names the problem and the way out, so the recipes print the message
alone, with no traceback (``entrodrop.cli``). Any other exception is a bug, and keeps its
traceback.

Each subclass also derives from the built-in error it used to be (``ValueError``,
``FileExistsError``...), so ``except ValueError`` still catches it.
"""


class EntroDropError(Exception):
    """A mistake in what the user gave; the message says what it is and how to fix it."""
