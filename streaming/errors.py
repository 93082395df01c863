"""The one exception root of the router: every error a user can see derives from `RouterError`."""

from __future__ import annotations


class RouterError(Exception):
    """Something the user can fix: the message says what was expected and what arrived."""


class ConfigError(RouterError):
    """A settings, route or catalog file is invalid (names the file, line and field)."""


class MalformedRecord(RouterError):
    """A record's bytes do not decode with its Avro schema."""


class KafkaUnavailable(RouterError):
    """The broker could not be reached, started or stopped."""


class SparkMasterUnavailable(RouterError):
    """A `spark://` master did not answer, or did not take the router's application."""


class TopicMissing(RouterError):
    """An expected topic is not in the metadata of the broker that answered.

    Not created, or not known to that broker yet: a topic made a moment ago reaches each broker's
    metadata in turn.
    """


ERROR_CHARS = 600
"""How much of an error's text `short_error` keeps."""


def short_error(error: BaseException) -> str:
    """The first line of an error (a Java one's, for an error from Spark), cut to `ERROR_CHARS`.

    The error a foreachBatch function raises travels back into Spark as text, and Spark matches
    patterns against it; a whole Java stack trace with the generated code in it overflows that
    match's stack, which ends the query with a StackOverflowError instead of the error. A person
    reading a line of progress wants the first line too.
    """
    java = getattr(error, "java_exception", None)
    text = str(java.toString()) if java is not None else f"{type(error).__name__}: {error}"
    first = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    return first[:ERROR_CHARS]
