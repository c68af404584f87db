"""FairRAG for LangChain: a fair retriever over any vector store, a fair re-ranking compressor,
a citation parser, a fairness callback handler and the paper's RAG chain.

Thin adapters: every decision about groups, scores, ranking and metrics is taken by
:mod:`fairrag_core`; this package only translates LangChain objects to and from it.
"""

from .callbacks import FairnessCallbackHandler
from .chains import MissingChatModelError, default_chat_model, make_fair_rag_chain
from .document_compressors import FairReranker
from .output_parsers import AnswerLine, CitationOutputParser, CitedAnswer, ParsedCitation
from .retrievers import FairRetriever

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
    "make_fair_rag_chain",
]
