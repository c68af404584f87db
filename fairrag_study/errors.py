"""Errors of the study that end ``fairrag study`` with a message and exit status 2."""

from __future__ import annotations

__all__ = [
    "AnswerStoreError",
    "GeneratorUnavailableError",
    "IndexDamagedError",
    "ModelNotFoundError",
    "OutputFolderError",
    "StudyError",
    "WikipediaError",
    "WikipediaUnavailableError",
]


class StudyError(Exception):
    """A study cannot run or cannot go on; the message says why and what to do."""


class OutputFolderError(StudyError):
    """``--out`` holds files the study did not write, or another study is writing there."""


class IndexDamagedError(StudyError):
    """The vector index does not hold what the corpus says (missing or damaged segment files)."""


class ModelNotFoundError(StudyError, OSError):
    """``--model`` names no model found here: not the packaged one, not a folder, and neither in
    the Hugging Face cache nor reachable on the hub."""


class GeneratorUnavailableError(StudyError):
    """The chat model's server failed a request (HTTP error, refused connection, timeout, a reply
    the client could not read)."""


class AnswerStoreError(StudyError):
    """The answer store (the chat model answers already paid for) cannot be read or written."""


class WikipediaError(StudyError):
    """The MediaWiki API answered something other than articles (``--text wikipedia``): an HTTP
    status or an error it will not retry, or a reply that is not the API's JSON."""


class WikipediaUnavailableError(WikipediaError):
    """The MediaWiki API stayed unavailable (transport errors, HTTP 429/5xx, ``maxlag``) through
    every retry, or asked for a longer wait than allowed; what was fetched stays cached."""
