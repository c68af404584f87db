"""FairRAG for LangChain: a fair retriever over any vector store, a fair re-ranking compressor,
a citation parser, a fairness callback handler and the paper's RAG chain.

Thin adapters: every decision about groups, scores, ranking and metrics is taken by
:mod:`fairrag_core`; this package only translates LangChain objects to and from it. It needs
``langchain-core`` only (``pip install 'fairrag[langchain]'``); ``make_fair_rag_chain``'s
default chat model needs ``fairrag[openai]``. The names below are imported on first use
(PEP 562): ``from fairrag_langchain import FairReranker`` loads the compressor's modules, not the
chain's or the handler's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fairrag_core.lazy import lazy_exports

if TYPE_CHECKING:
    from .callbacks import FairnessCallbackHandler
    from .chains import MissingChatModelError, default_chat_model, make_fair_rag_chain
    from .document_compressors import FairReranker
    from .output_parsers import AnswerLine, CitationOutputParser, CitedAnswer, ParsedCitation
    from .retrievers import FairRetriever
    from .tools import fair_retriever_tool

__all__ = [
    "AnswerLine",
    "CitationOutputParser",
    "CitedAnswer",
    "FairReranker",
    "FairRetriever",
    "FairnessCallbackHandler",
    "MissingChatModelError",
    "ParsedCitation",
    "default_chat_model",
    "fair_retriever_tool",
    "make_fair_rag_chain",
]

_HOME = {
    "FairnessCallbackHandler": "callbacks",
    "MissingChatModelError": "chains",
    "default_chat_model": "chains",
    "make_fair_rag_chain": "chains",
    "FairReranker": "document_compressors",
    "AnswerLine": "output_parsers",
    "CitationOutputParser": "output_parsers",
    "CitedAnswer": "output_parsers",
    "ParsedCitation": "output_parsers",
    "FairRetriever": "retrievers",
    "fair_retriever_tool": "tools",
}


__getattr__, __dir__ = lazy_exports(__name__, _HOME, __all__)
