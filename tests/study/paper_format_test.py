"""The paper's format as a decoding constraint (fairrag_study.paper_format), on a word-piece
tokenizer small enough to read: whatever the model prefers, every answer is lines the paper's
parser reads as citations of shown titles, each title once, every line finished within the
token budget (docs/SPEC.md, "The study" → Local generator)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fairrag_core.citations import ground_citations, parse_citations
from fairrag_study.paper_format import MAX_NAME_TOKENS, PaperFormatProcessor, paper_format


class FakeWordPieceTokenizer:
    """A test double: a fixed vocabulary, encoded by longest match; not a real tokenizer."""

    VOCAB = (
        "<eos>", "-", " (", "(", ")", "\n", "Doc", "Title", ":", " Marie", " Cur", "ie",
        " Alan", " Tur", "ing", " John", " Smith", " engineer", "engineer", " ", "a", "b",
        " X", ".", "é", "1", "\ufffd", "Q:", "Hello", *"cdefghijklmnopqrstuvwxyz",
    )  # fmt: skip
    eos_token_id = 0

    def __len__(self) -> int:
        return len(self.VOCAB)

    def decode(self, ids: list[int]) -> str:
        return "".join(self.VOCAB[i] for i in ids)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids = []
        while text:
            best = max(
                (i for i, piece in enumerate(self.VOCAB) if piece and text.startswith(piece)),
                key=lambda i: len(self.VOCAB[i]),
            )
            ids.append(best)
            text = text[len(self.VOCAB[best]) :]
        return ids


TITLES = ["Marie Curie", "Alan Turing", "John Smith", "John Smith (engineer)"]


def _decode_greedily(titles: list[list[str]], budget: int, seed: int) -> list[str]:
    """Greedy decoding of a batch under the constraint, the "model" scoring at random."""
    tokenizer = FakeWordPieceTokenizer()
    processor = PaperFormatProcessor(paper_format(tokenizer), titles, budget)
    rng = np.random.default_rng(seed)
    ids = torch.zeros((len(titles), 1), dtype=torch.long)
    done = [False] * len(titles)
    for _ in range(budget):
        scores = torch.tensor(rng.normal(size=(len(titles), len(tokenizer))), dtype=torch.float)
        chosen = processor(ids, scores).argmax(dim=1)
        chosen = torch.where(torch.tensor(done), torch.tensor(0), chosen)
        done = [d or int(c) == 0 for d, c in zip(done, chosen, strict=True)]
        ids = torch.cat([ids, chosen[:, None]], dim=1)
    return [tokenizer.decode([i for i in row[1:].tolist() if i != 0]) for row in ids]


@pytest.mark.parametrize("seed", range(12))
def test_any_model_preference_gives_lines_citing_shown_titles_once_each(seed):
    answers = _decode_greedily([TITLES, TITLES[:2]], budget=200, seed=seed)
    for answer, shown in zip(answers, [TITLES, TITLES[:2]], strict=True):
        parsed = parse_citations(answer)
        lines = answer.splitlines()
        assert lines and all(line.startswith("- ") for line in lines), answer
        assert not parsed.unparsed and not parsed.prose, answer
        assert len(parsed.citations) == len(lines) <= len(shown)
        cited = [c.title for c in parsed.citations]
        assert len(set(cited)) == len(cited), answer  # each title at most once
        assert all(g.valid for g in ground_citations(parsed, shown)), answer
        for citation in parsed.citations:
            assert any(ch.isalpha() for ch in citation.person)
            assert "(" not in citation.person and ":" not in citation.person


def test_a_title_that_prefixes_another_can_be_cited_either_way():
    seen = set()
    for seed in range(40):
        for answer in _decode_greedily([["John Smith", "John Smith (engineer)"]], 200, seed):
            seen.update(c.title for c in parse_citations(answer).citations)
    assert seen == {"John Smith", "John Smith (engineer)"}


@pytest.mark.parametrize("budget", [20, 28, 45])
def test_no_line_is_begun_that_the_token_budget_cannot_finish(budget):
    for seed in range(6):
        (answer,) = _decode_greedily([TITLES], budget, seed)
        parsed = parse_citations(answer)
        assert parsed.citations and not parsed.unparsed, answer
        assert answer.endswith(")\n") or answer.endswith(")"), answer


def test_the_name_is_bounded_and_the_first_line_is_always_begun():
    tokenizer = FakeWordPieceTokenizer()
    spec = paper_format(tokenizer)
    processor = PaperFormatProcessor(spec, [["Marie Curie"]], 200)
    ids = torch.zeros((1, 1), dtype=torch.long)
    scores = torch.zeros((1, len(tokenizer)))
    allowed = torch.isfinite(processor(ids, scores)[0]).nonzero().flatten().tolist()
    assert allowed == [spec.dash]  # not the end: an answer cites at least once
    ids = torch.tensor([[0, spec.dash]])
    for _ in range(MAX_NAME_TOKENS):  # the model wants the name to go on for ever
        scores = torch.zeros((1, len(tokenizer)))
        scores[0, tokenizer.encode(" X")[0]] = 10.0
        chosen = int(processor(ids, scores).argmax())
        ids = torch.cat([ids, torch.tensor([[chosen]])], dim=1)
    scores = torch.zeros((1, len(tokenizer)))
    scores[0, tokenizer.encode(" X")[0]] = 10.0
    allowed = torch.isfinite(processor(ids, scores)[0]).nonzero().flatten().tolist()
    assert allowed == [spec.open[0]]


def test_no_title_to_cite_is_a_clear_error():
    spec = paper_format(FakeWordPieceTokenizer())
    with pytest.raises(ValueError, match="titles must hold at least one non-blank title"):
        PaperFormatProcessor(spec, [[" ", ""]], 100)
