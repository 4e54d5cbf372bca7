"""kiln's exceptions: every kiln failure is a :class:`KilnError` carrying kiln's message.

The message is kiln's own and says where: the file, and where it applies the record index and byte
offset (``"... shard-00000.kiln record 12 (offset 8192): checksum mismatch ..."``). The same place
is in ``path``, ``record`` (the record index inside that file) and ``offset`` (bytes), each None
when unknown. ``code`` is the kiln status code name (``"Corruption"``, ``"NotFound"``, ...). Subclasses let callers catch
one kind, and each also derives from the closest built-in exception:

====================  ==============================  ==========================
kiln status code      exception                       also a
====================  ==============================  ==========================
InvalidArgument       :class:`InvalidArgumentError`   ``ValueError``
(wrong Python type)   :class:`ArgumentTypeError`      ``InvalidArgumentError``, ``TypeError``
NotFound              :class:`NotFoundError`          ``FileNotFoundError``
Corruption            :class:`CorruptionError`        ``RuntimeError``
IOError               :class:`KilnIOError`            ``OSError``
NotSupported          :class:`NotSupportedError`      ``NotImplementedError``
OutOfRange            :class:`OutOfRangeError`        ``IndexError``
Cancelled, Internal   :class:`KilnError`              ``RuntimeError``
====================  ==============================  ==========================

Bad arguments. Every argument of the public API is checked once, in C++ where it becomes an
option (``kiln::LoaderOptions``, ``kiln::PackOptions``), with the command line's message: a value
out of range (``batch_size=0``, ``batch_size=2**40``, ``prefetch=-1``) raises
:class:`InvalidArgumentError`, a value of the wrong type (``batch_size="8"``) raises
:class:`ArgumentTypeError`. Both are :class:`KilnError` and ``ValueError``; the second is also a
``TypeError``, so ``except TypeError`` and ``except kiln.KilnError`` both catch it.
"""

from typing import Dict, Optional, Type


class KilnError(RuntimeError):
    """A kiln operation failed. ``str(e)`` is kiln's message; ``e.code`` its status code name;
    ``e.path``, ``e.record`` and ``e.offset`` where it was seen (None when unknown)."""

    code: str = "Unknown"
    path: Optional[str] = None
    record: Optional[int] = None
    offset: Optional[int] = None

    def __init__(self, message: str, code: Optional[str] = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class InvalidArgumentError(KilnError, ValueError):
    """An argument or option is out of range or malformed (the message names it)."""

    code = "InvalidArgument"


class ArgumentTypeError(InvalidArgumentError, TypeError):
    """An argument of the wrong Python type (the message names it and the type given)."""

    code = "InvalidArgument"


class NotFoundError(KilnError, FileNotFoundError):
    """A file or directory does not exist, or a directory is not a kiln dataset."""

    code = "NotFound"

    def __init__(self, message: str, code: Optional[str] = None) -> None:
        KilnError.__init__(self, message, code)

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class CorruptionError(KilnError):
    """Bytes on disk do not match their format or checksum (file, record and offset named)."""

    code = "Corruption"


class KilnIOError(KilnError, OSError):
    """The operating system refused an operation (open, read, write, rename)."""

    code = "IOError"

    def __init__(self, message: str, code: Optional[str] = None) -> None:
        KilnError.__init__(self, message, code)

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class NotSupportedError(KilnError, NotImplementedError):
    """A valid request this build or format version cannot serve."""

    code = "NotSupported"


class OutOfRangeError(KilnError, IndexError):
    """An index or size beyond a valid bound."""

    code = "OutOfRange"


_BY_CODE: Dict[str, Type[KilnError]] = {
    cls.code: cls
    for cls in (InvalidArgumentError, NotFoundError, CorruptionError, KilnIOError,
                NotSupportedError, OutOfRangeError)
}


def error_from_status(code: str, message: str) -> KilnError:
    """Returns the exception instance for a kiln status (used by the C++ extensions)."""
    return _BY_CODE.get(code, KilnError)(message, code)
