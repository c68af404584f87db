"""The paper's prompt as a LlamaIndex QA template (role, context, question, format, rules)."""

from __future__ import annotations

from llama_index.core.prompts import PromptTemplate

from fairrag_core.prompts import ROLE, format_instructions

__all__ = ["PAPER_QA_TEMPLATE"]

PAPER_QA_TEMPLATE = PromptTemplate(
    f"{ROLE}\n\nContext:\n{{context_str}}\n\nQuestion: {{query_str}}\n\n{format_instructions()}"
)
"""Use as ``index.as_query_engine(..., text_qa_template=PAPER_QA_TEMPLATE)``: the same prompt as
:func:`fairrag_core.prompts.render_prompt`, with LlamaIndex filling the context."""
