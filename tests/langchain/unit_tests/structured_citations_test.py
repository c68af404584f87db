"""Issue 32, item 2: structured citations read the frameworks' own way, giving the same result
as the same citations written as text: ``CitationOutputParser`` and the handler read
tool-call arguments (``with_structured_output``), JSON content, provider citation content blocks
and structured objects, source ids from the stated base. On main the structured answer was
recorded as ``""`` (every generation metric n/a) and JSON content gave 0 citations."""

from __future__ import annotations

import json

import pytest
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnablePassthrough
from pydantic import BaseModel, Field

from fairrag_langchain import CitationOutputParser, FairnessCallbackHandler, FairRetriever
from fairrag_langchain.fakes import FakeSearchingChatModel
from tests.langchain.doubles import FixedPoolStore, imbalanced_pool, person_documents


class CitedAnswer(BaseModel):
    """Answer the question from the given sources, and cite the sources used (LangChain's
    citation how-to)."""

    answer: str = Field(description="The answer, based only on the given sources.")
    citations: list[int] = Field(description="The integer IDs of the sources that justify it.")


DOCUMENTS = person_documents(["female", "male", "female", "male"])
TEXT = "- Person 02 (DocTitle: Person 02)\n- Person 03 (DocTitle: Person 03)"
ARGS = {"answer": "", "citations": [2, 3]}  # 0-based: the 3rd and 4th documents


def parsed(parser: CitationOutputParser, message: AIMessage):
    return parser.parse_result([ChatGeneration(message=message)])


def fields(answer) -> list[tuple]:
    return [(c.title, c.valid, c.group, c.context_index) for c in answer.citations]


@pytest.mark.parametrize(
    "message",
    [
        AIMessage(
            content="",
            tool_calls=[{"name": "CitedAnswer", "args": ARGS, "id": "1", "type": "tool_call"}],
        ),
        AIMessage(content=json.dumps(ARGS)),
        AIMessage(
            content=[
                {"type": "text", "text": "- "},
                {"type": "text", "text": "Person 02", "citations": [{"document_index": 2}]},
                {"type": "text", "text": "\n- "},
                {"type": "text", "text": "Person 03", "citations": [{"document_index": 3}]},
            ]
        ),
    ],
    ids=["tool call", "json content", "content blocks"],
)
def test_the_parser_reads_structured_citations_as_the_same_text(message):
    parser = CitationOutputParser(context=DOCUMENTS, group_key="gender")
    expected = fields(parser.parse(TEXT))
    assert expected == [("Person 02", True, "female", 2), ("Person 03", True, "male", 3)]
    assert fields(parsed(parser, message)) == expected


def test_the_parser_reads_a_structured_object_and_the_base_it_is_told():
    parser = CitationOutputParser(context=DOCUMENTS, group_key="gender")
    answer = parser.parse_structured(CitedAnswer(answer="", citations=[2, 3]))
    assert fields(answer) == fields(parser.parse(TEXT))
    from_one = CitationOutputParser(context=DOCUMENTS, group_key="gender", source_id_base=1)
    assert [c.title for c in from_one.parse_structured(ARGS).citations] == [
        "Person 01",
        "Person 02",
    ]
    with pytest.raises(ValueError, match="source_id_base must be 0"):
        CitationOutputParser(source_id_base=2)


def chain(retriever, llm):
    prompt = ChatPromptTemplate.from_template("Context:\n{context}\nQuestion: {question}")
    render = lambda docs: "\n\n".join(d.page_content for d in docs)  # noqa: E731
    return {"context": retriever | render, "question": RunnablePassthrough()} | prompt | llm


def test_with_structured_output_gives_the_record_of_the_same_citations_as_text():
    store = FixedPoolStore(*imbalanced_pool())
    records = {}
    for form in ("text", "tool_call"):
        retriever = FairRetriever(vectorstore=store, group_key="gender", protected="female", seed=0)
        handler = FairnessCallbackHandler.from_retriever(retriever)
        llm = FakeSearchingChatModel(searches=[], answer_format=form, max_citations=3)
        if form == "tool_call":
            llm = llm.with_structured_output(CitedAnswer)
        output = chain(retriever, llm).invoke("who?", {"callbacks": [handler]})
        [records[form]] = handler.records
        if form == "tool_call":
            assert isinstance(output, CitedAnswer) and output.citations == [0, 1, 2]
    text, structured = records["text"], records["tool_call"]
    assert structured["framework"]["answer_format"] == "tool_call"
    assert structured["framework"]["source_id_base"] == 0
    assert structured["n_valid_citations"] == 3
    for name in ("answer", "groundedness", "generation_parity", "citations", "attributed_sources"):
        assert structured[name] == text[name], name


def test_make_fair_rag_chain_structured_gives_the_record_of_the_same_citations_as_text():
    from fairrag_langchain import make_fair_rag_chain
    from fairrag_langchain.chains import FairCitedAnswer

    store = FixedPoolStore(*imbalanced_pool())
    outputs = {}
    for citations in ("text", "structured"):
        retriever = FairRetriever(vectorstore=store, group_key="gender", protected="female", seed=0)
        llm = FakeSearchingChatModel(
            searches=[],
            answer_format="text" if citations == "text" else "tool_call",
            answer_tool=FairCitedAnswer.__name__,
            cite_by="title",
        )
        chain = make_fair_rag_chain(retriever, llm, citations=citations)
        outputs[citations] = chain.invoke("who?")
    text, structured = outputs["text"], outputs["structured"]
    assert (
        structured["answer"] == text["answer"] and structured["metrics"]["n_valid_citations"] == 5
    )
    for name in ("groundedness", "generation_parity", "citations"):
        assert structured["metrics"][name] == text["metrics"][name], name


@pytest.mark.parametrize("form", ["tool_call", "text"])
def test_make_fair_rag_chain_structured_streams_what_it_invokes(form):
    """``chain.stream``/``astream`` with ``citations="structured"`` over a chat model that does
    not stream (LangChain then hands the parser one whole message, from which its partial
    tool-call parsing yields nothing) raised LangChain's ``UnboundLocalError`` (a lambda step
    given an empty stream), also when the model answers in text instead of the tool; the
    streamed output is the invoked one."""
    import asyncio

    from fairrag_langchain import make_fair_rag_chain
    from fairrag_langchain.chains import FairCitedAnswer

    def run(mode):
        retriever = FairRetriever(
            vectorstore=FixedPoolStore(*imbalanced_pool()),
            group_key="gender",
            protected="female",
            seed=0,
        )
        llm = FakeSearchingChatModel(
            searches=[], answer_format=form, answer_tool=FairCitedAnswer.__name__, cite_by="title"
        )
        chain = make_fair_rag_chain(retriever, llm, citations="structured")
        if mode == "invoke":
            return chain.invoke("who?")
        if mode == "stream":
            chunks = list(chain.stream("who?"))
        else:

            async def collect():
                return [chunk async for chunk in chain.astream("who?")]

            chunks = asyncio.run(collect())
        merged = {}
        for chunk in chunks:
            for key, value in chunk.items():
                merged[key] = merged[key] + value if key == "answer" and key in merged else value
        return merged

    invoked = run("invoke")
    assert invoked["metrics"]["n_valid_citations"] == (5 if form == "tool_call" else 0)
    for mode in ("stream", "astream"):
        streamed = run(mode)
        assert streamed["answer"] == invoked["answer"], mode
        for name, value in invoked["metrics"].items():  # NaN where n/a: compared as text
            if name != "timestamp":
                assert repr(streamed["metrics"][name]) == repr(value), (mode, name)


def test_make_fair_rag_chain_structured_falls_back_to_text_with_a_warning():
    from fairrag_langchain import make_fair_rag_chain
    from fairrag_langchain.fakes import FakeCitingChatModel

    retriever = FairRetriever(
        vectorstore=FixedPoolStore(*imbalanced_pool()), group_key="gender", protected="female"
    )
    with pytest.warns(UserWarning, match="has no structured output"):
        chain = make_fair_rag_chain(retriever, FakeCitingChatModel(), citations="structured")
    assert chain.invoke("who?")["metrics"]["n_valid_citations"] == 5
    with pytest.raises(ValueError, match="citations must be 'text' or 'structured'"):
        make_fair_rag_chain(retriever, FakeCitingChatModel(), citations="json")


class PlainAnswer(BaseModel):
    """An answer schema with no citations list: the citations are in its text."""

    answer: str


@pytest.mark.parametrize("form", ["tool_call", "json"])
def test_a_structured_answer_without_a_citations_list_is_recorded_as_its_text(form):
    """A user trial: ``with_structured_output(Answer)`` / ``ProviderStrategy`` with a schema
    ``Answer(answer: str)`` whose text cites as the paper does was recorded as ``""`` (or the
    raw JSON) with groundedness 0; the record is that of the same text given as text."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    store = FixedPoolStore(*imbalanced_pool())
    said = "- Person 01 (DocTitle: Person 01)\n- Person 05 (DocTitle: Person 05)"
    records = {}
    for kind in ("text", form):
        retriever = FairRetriever(vectorstore=store, group_key="gender", protected="female", seed=0)
        handler = FairnessCallbackHandler.from_retriever(retriever)
        if kind == "text":
            message = AIMessage(content=said)
        elif kind == "json":
            message = AIMessage(content=json.dumps({"answer": said}))
        else:
            call = {"name": "PlainAnswer", "args": {"answer": said}, "id": "1", "type": "tool_call"}
            message = AIMessage(content="", tool_calls=[call])
        chain(retriever, GenericFakeChatModel(messages=iter([message]))).invoke(
            "who?", {"callbacks": [handler]}
        )
        [records[kind]] = handler.records
    text, structured = records["text"], records[form]
    assert structured["framework"]["answer_format"] == form
    assert structured["answer"] == said and structured["n_citations"] == 2
    for name in ("groundedness", "generation_parity", "citations", "attributed_sources"):
        assert structured[name] == text[name], name
