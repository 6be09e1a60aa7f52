"""The base of every error the user can fix; the CLI prints these as one line."""


class GdpvalError(Exception):
    """A problem with input or environment, worded as what to fix."""

    exit_code = 2


class RunConflict(GdpvalError):
    """The stored run is another one, or pins other settings: it is never resumed over."""
