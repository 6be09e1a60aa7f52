"""The base of every error the user can fix; the CLI prints these as one line."""


class GdpvalError(Exception):
    """A problem with input or environment, worded as what to fix."""
