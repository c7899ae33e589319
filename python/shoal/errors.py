"""shoal's Python exception."""


class ShoalError(Exception):
    """A mistake in the annotation, or a shoal tool that failed: the tool's
    own error message, with the command (`.command`), its exit status
    (`.returncode`) and whole output (`.output`) when a tool failed."""

    def __init__(self, message, command=None, returncode=None, output=None):
        super().__init__(message)
        self.command = command
        self.returncode = returncode
        self.output = output
