"""The base of every error a user can act on. The CLI prints its message as one line and exits 1;
anything else is a bug and keeps its traceback."""


class MpiplatError(Exception):
    """A domain error: the message names what is wrong and what to do."""
