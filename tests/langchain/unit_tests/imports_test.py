"""The public names of fairrag_langchain (the partner-package convention)."""

import fairrag_langchain

EXPECTED_ALL = [
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


def test_all_imports() -> None:
    assert sorted(EXPECTED_ALL) == sorted(fairrag_langchain.__all__)
    for name in EXPECTED_ALL:
        assert getattr(fairrag_langchain, name) is not None


def test_the_package_is_typed() -> None:
    from importlib.resources import files

    assert files("fairrag_langchain").joinpath("py.typed").is_file()


def test_every_pydantic_field_has_a_one_line_docstring() -> None:
    import ast
    import inspect

    from fairrag_langchain import (
        CitationOutputParser,
        CitedAnswer,
        FairReranker,
        FairRetriever,
        ParsedCitation,
    )
    from fairrag_langchain._fields import FairRankingFields
    from fairrag_langchain.fakes import FakeCitingChatModel

    for model in (
        FairRankingFields,
        FairRetriever,
        FairReranker,
        CitationOutputParser,
        ParsedCitation,
        CitedAnswer,
        FakeCitingChatModel,
    ):
        body = ast.parse(inspect.getsource(model)).body[0].body
        for statement, following in zip(body, [*body[1:], None], strict=True):
            if not isinstance(statement, ast.AnnAssign):
                continue
            name = statement.target.id
            if name.startswith("_") or name == "model_config":
                continue
            assert isinstance(following, ast.Expr) and isinstance(following.value.value, str), (
                f"{model.__name__}.{name} has no docstring"
            )
            assert "\n" not in following.value.value, f"{model.__name__}.{name}: one line"
