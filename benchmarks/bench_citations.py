"""Citations: the person rule on real data, and the parser's and grounding's speed on 1 MB of
adversarial text. A benchmark (it prints figures), not a test.

Run: ``.venv/bin/python benchmarks/bench_citations.py [--data trec_gender_2022.csv]
[--seed 0] [--megabytes 1]`` (``--data`` defaults to ``$FAIRRAG_DATA``; without data only the
speed part runs).

**Person rule** (docs/SPEC.md, "Citations"; :func:`fairrag_core.citations.names_person`). For
every distinct document with text, its *opening name* is the start of its first sentence up to
the first ``,``, ``;``, `` was ``, `` is ``, `` are ``, `` were `` or date parenthesis
(:func:`opening_name`); documents whose opening is empty, does not start with a capital letter or
runs over 12 words hold no name and are counted apart. It prints:

- *self-failure*: the fraction of opening names the rule says do NOT name their own document's
  person (the title without a trailing parenthetical), for the first rule (exact words,
  reordered, or a run of whole words), the title-only rule, and the rule reading the
  document's own text too (its aliases, :func:`fairrag_core.citations.document_aliases`: the
  study's document, ``Title: <title>`` then the first sentence);
- *wrong acceptance*: each opening name against another document of the same topic, drawn
  with ``--seed`` (never the same title), by its title alone and with its text: the fraction
  the rule accepts.

**Speed.** CPU seconds per MB (the least of 3 runs) for ``parse_citations``,
``ground_citations`` and ``attribute_answer`` (with its ratio to the parser's time, issue 33's
bound: 3x) on worst cases: long whitespace runs, many ``(``, nested emphasis, one 1 MB line,
many short lines, many citations with long names, and a 1 MB context title; and on answers
whose lines all differ: ``varied answers`` (:func:`varied_answers`: 10 shown documents, every
style a model writes, descriptions drawn at random) and ``distinct citation lines`` (a new
middle name on every line, so no name is read twice). The last lines give those two ratios
against the bound.
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import re
import sys
import time
import unicodedata
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fairrag_core import attribution, citations  # noqa: E402
from fairrag_core.attribution import attribute_answer  # noqa: E402
from fairrag_core.citations import (  # noqa: E402
    Citation,
    ContextDocument,
    ground_citations,
    names_person,
    parse_citations,
    person_names,
)

_OPENING_END = re.compile(r"[,;]| (?:was|is|are|were) ")
_DATE_OR_EMPTY = re.compile(r"[\d;,]|^\W*$")
_MAX_OPENING_WORDS = 12


def opening_name(first_sentence: str) -> str | None:
    """The name that opens a TREC document's first sentence, or None when there is none.

    The text before the first ``,``, ``;``, `` was ``, `` is ``, `` are `` or `` were ``, or
    before the first parenthesis that holds a digit, ``;`` or ``,`` or nothing but punctuation
    (dates, pronunciations: ``John Edward Masefield (; 1 June 1878 ...``); a parenthesis
    without (``Vladislav (Vlad) Nikolayevich Listyev``) stays in the name. Whitespace is
    collapsed; None when the result is empty, does not start with a capital letter, or has more
    than 12 words (a sentence, not a name).
    """
    end = len(first_sentence)
    match = _OPENING_END.search(first_sentence)
    if match:
        end = match.start()
    opening = first_sentence.find("(", 0, end)
    while opening != -1:
        closing = first_sentence.find(")", opening, end)
        if closing == -1 or _DATE_OR_EMPTY.search(first_sentence[opening + 1 : closing]):
            end = opening
            break
        opening = first_sentence.find("(", closing, end)
    name = " ".join(first_sentence[:end].split())
    if not name or not name[0].isupper() or len(name.split()) > _MAX_OPENING_WORDS:
        return None
    return name


def document_person(title: str) -> str:
    """The person a document is about, as grounding derives it from its title."""
    return ContextDocument(title).person


def rule_before(cited: str, person: str) -> bool:
    """The person rule before this change: equal, reordered, or a run of whole words."""

    def tokens(name: str) -> tuple[str, ...]:
        folded = unicodedata.normalize("NFKD", name.casefold())
        folded = "".join(c for c in folded if not unicodedata.combining(c))
        return tuple(re.findall(r"\w+", folded))

    a, b = tokens(cited), tokens(person)
    if not a or not b:
        return False
    if a == b or sorted(a) == sorted(b):
        return True
    short, long = (a, b) if len(a) <= len(b) else (b, a)
    n = len(short)
    return any(long[i : i + n] == short for i in range(len(long) - n + 1))


def load_documents(path: Path) -> list[dict[str, str]]:
    """One row per distinct doc_id with text (the first row seen), every topic kept."""
    documents: dict[str, dict[str, str]] = {}
    topics: dict[str, set[str]] = {}
    with open(path, encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle):
            if not row["first sentence"].strip():
                continue
            documents.setdefault(row["doc_id"], row)
            topics.setdefault(row["doc_id"], set()).add(row["q_text"])
    for doc_id, row in documents.items():
        row["topics"] = "|".join(sorted(topics[doc_id]))
    return list(documents.values())


def person_rule_figures(documents: list[dict[str, str]], seed: int) -> None:
    named = [(d, name) for d in documents if (name := opening_name(d["first sentence"]))]
    by_topic: dict[str, list[str]] = {}
    for document in documents:
        for topic in document["topics"].split("|"):
            by_topic.setdefault(topic, []).append(document["doc_title"])
    print(f"documents with text: {len(documents):,}; with an opening name: {len(named):,}")
    text_of = {d["doc_title"]: d["first sentence"] for d in documents}
    rules = (
        ("first rule", rule_before),
        ("title only", lambda n, title: names_person(n, document_person(title))),
        ("title and text", lambda n, title: with_text(n, title, text_of[title])),
    )
    for label, rule in rules:
        failures = [(n, d["doc_title"]) for d, n in named if not rule(n, d["doc_title"])]
        share = len(failures) / len(named)
        print(f"self-failure, {label}: {len(failures):,} / {len(named):,} = {share:.2%}")
        if label == "title and text":
            for name, title in failures[:12]:
                print(f"  missed: {name!r} for {title!r}")
    for label, rule in rules[1:]:
        rng = random.Random(seed)
        accepted = []
        for document, name in named:
            topic = rng.choice(document["topics"].split("|"))
            others = [t for t in by_topic[topic] if t != document["doc_title"]]
            if not others:
                continue
            other = rng.choice(others)
            if rule(name, other):
                accepted.append((name, other))
        print(
            f"wrong acceptance, {label} (opening name vs a random same-topic document, seed "
            f"{seed}): {len(accepted):,} / {len(named):,} = {len(accepted) / len(named):.3%}"
        )
        for name, other in accepted[:10]:
            print(f"  accepted: {name!r} for {other!r}")


NAME_FORMS: dict[str, Callable[[str], str | None]] = {
    "exact": lambda p: f"- {p}",
    "numbered": lambda p: f"1. {p}",
    "bold, glued colon": lambda p: f"- **{p}**: a role model",
    "possessive": lambda p: f"- {p}'s work inspires many",
    "inverted": lambda p: (
        f"- {p.split()[-1]}, {' '.join(p.split()[:-1])}" if len(p.split()) == 2 else None
    ),
    "xml answer": lambda p: f"<answer>{p} is a role model.</answer>",
    "one-letter slip": lambda p: _slip(p),
}
"""Bullets that name a document's own person (``p``), each in one form a reader would accept;
``inverted`` only for two-word names (``Curie, Marie``); ``one-letter slip`` only for names of
2 or more words whose longest word has 6 or more letters (its middle letter dropped)."""


def _slip(person: str) -> str | None:
    """``- <person>`` with the middle letter of its longest word dropped (``Damrong`` ->
    ``Damong``), or None when the name has one word or its longest word is under 6 letters."""
    words = person.split()
    longest = max(range(len(words)), key=lambda i: len(words[i]))
    word = words[longest]
    if len(words) < 2 or len(word) < 6 or not word.isalpha():
        return None
    middle = len(word) // 2
    words[longest] = word[:middle] + word[middle + 1 :]
    return "- " + " ".join(words)


def name_form_figures(documents: list[dict[str, str]], seed: int) -> None:
    """Every document's own person (its title without a trailing parenthetical) written in each
    of :data:`NAME_FORMS`, as an answer attributed against that document shown alone (the study's
    document: ``Title:`` line, then the first sentence): *misses* are answers attributed to
    nothing; *wrong acceptances* are the same answers attributed against another document of
    the same topic (drawn with ``seed``) shown alone. Per group (the CSV's ``gender``)."""
    by_topic: dict[str, list[dict[str, str]]] = {}
    for document in documents:
        for topic in document["topics"].split("|"):
            by_topic.setdefault(topic, []).append(document)

    def shown(row: dict[str, str]) -> ContextDocument:
        title = row["doc_title"]
        return ContextDocument(
            title, group=row["gender"], text=f"Title: {title}\n{row['first sentence']}"
        )

    print("\nname forms: each document's own person as a bullet, the document shown alone")
    print(f"  {'form':18s} {'group':7s} {'answers':>8s} {'misses':>14s} {'wrong acceptances':>18s}")
    for label, form in NAME_FORMS.items():
        rng = random.Random(seed)
        counts: dict[str, list[int]] = {}
        missed: list[str] = []
        for row in documents:
            document = shown(row)
            answer = form(document.person or document.title)
            if answer is None:
                continue
            topic = rng.choice(row["topics"].split("|"))
            others = [o for o in by_topic[topic] if o["doc_title"] != row["doc_title"]]
            tally = counts.setdefault(row["gender"], [0, 0, 0])
            tally[0] += 1
            if not attribute_answer(answer, [document]).attributions:
                tally[1] += 1
                missed.append(answer)
            if others and attribute_answer(answer, [shown(rng.choice(others))]).attributions:
                tally[2] += 1
        for group, (total, misses, wrong) in sorted(counts.items()):
            print(
                f"  {label:18s} {group:7s} {total:8,d} {misses:6,d} ({misses / total:5.2%}) "
                f"{wrong:8,d} ({wrong / total:6.3%})"
            )
        for answer in missed[:5]:
            print(f"    missed: {answer!r}")


def with_text(name: str, title: str, first_sentence: str) -> bool:
    """The rule on the study's document: ``Title: <title>`` then the first sentence."""
    document = ContextDocument(title, text=f"Title: {title}\n{first_sentence}")
    return person_names(name, document, {}, 0)


def worst_cases(size: int) -> dict[str, tuple[str, list[ContextDocument]]]:
    """Adversarial answers (and contexts) of about ``size`` characters."""
    line = "- Ada Lovelace (DocTitle: Ada Lovelace)\n"
    long_name = "- " + "Ada " * 70 + "Lovelace (DocTitle: Ada Lovelace)\n"
    ada = [ContextDocument("Ada Lovelace", group="female")]
    return {
        "whitespace runs": (("a" + " " * 9_999 + "\n" + "\t" * 10_000) * (size // 20_001), ada),
        "blank lines": ("\n" * size, ada),
        "2-character lines": ("a\n" * (size // 2), ada),
        "4-character bullet lines": ("- (\n" * (size // 4), ada),
        "1 MB of (": ("(" * size, ada),
        "(DocTitle: + 1 MB of (": ("- Ada (DocTitle: " + "(" * size, ada),
        "1 MB of (doc ": ("(doc " * (size // 5), ada),
        "nested emphasis": ("- " + "*_" * (size // 4) + "Ada" + "_*" * (size // 4), ada),
        "emphasised citations": (
            "- *Ada Lovelace* (*DocTitle: Ada Lovelace*)\n" * (size // 44),
            ada,
        ),
        "one 1 MB line": ("- Ada (DocTitle: " + "x" * size + ")", ada),
        "citations, one per line": (line * (size // len(line)), ada),
        "citations with 70-word names": (long_name * (size // len(long_name)), ada),
        "1 MB context title": (line, [ContextDocument("Ada " + "(x " * (size // 3), group="f")]),
        "citations against a 1 MB person": (
            line * (size // len(line)),
            [ContextDocument("Ada Lovelace", person="Ada " + " " * size + "Lovelace")],
        ),
        "names full of ( and quotes": (
            ('- A ("B (C "D (E" F) G) H" I) (DocTitle: Ada Lovelace)\n') * (size // 52),
            ada,
        ),
        "distinct citation lines": (
            "".join(
                f"- Ada {chr(65 + n % 26)}{chr(97 + n // 26 % 26)}{chr(97 + n // 676 % 26)} "
                f"Lovelace [1], then [{n % 5 + 1}] (DocTitle: Ada Lovelace)\n"
                for n in range(size // 50)
            ),
            ada,
        ),
        "Unicode line separators": (
            "- Ada\u2028 (DocTitle: Ada\u2029Lovelace)\x85" * (size // 32),
            ada,
        ),
        "varied answers": varied_answers(size),
    }


_SHOWN = (
    ("Ada Lovelace", "female", "Augusta Ada King, Countess of Lovelace, was a mathematician"),
    ("Alan Turing", "male", "Alan Mathison Turing was an English mathematician"),
    ("Marie Curie", "female", "Marie Salomea Skłodowska-Curie, known as Marie Curie, was a"),
    ("Yusuf al-Qaradawi", "male", "Yusuf al-Qaradawi (9 September 1926) was an Egyptian scholar"),
    ("Émilie du Châtelet", "female", "Gabrielle Émilie Le Tonnelier de Breteuil, Marquise"),
    ("Srinivasa Ramanujan", "male", "Srinivasa Ramanujan was an Indian mathematician"),
    ("Grace Hopper (computer scientist)", "female", "Grace Brewster Hopper was an American"),
    ("John von Neumann", "male", "John von Neumann (born Neumann János Lajos) was a polymath"),
    ("Chien-Shiung Wu", "female", "Chien-Shiung Wu was a Chinese-American physicist"),
    ("Thích Nhất Hạnh", "male", "Thích Nhất Hạnh was a Vietnamese Thiền Buddhist monk"),
)
_NOT_SHOWN = ("Katherine Johnson", "Richard Feynman", "Hypatia", "Lise Meitner", "Carl Gauss")
_WORDS = (
    "pioneered computing mathematics analysis engine poetry physics radium work early machine "
    "theory cryptography wartime codes logic algorithm notes translated lectures discovered "
    "elements polonium research women science prize awarded twice teacher reform scholar "
    "jurisprudence writings influence modern programming compiler language navy number "
    "partitions series intuition journals game quantum projects nuclear mindfulness peace "
    "teachings books meditation experiments parity beta decay laboratory energy education"
).split()


def varied_answers(size: int, seed: int = 0) -> tuple[str, list[ContextDocument]]:
    """A realistic answer of about ``size`` characters whose lines all differ: 10 shown
    documents (the study's ``Title:`` then an opening sentence), each line one of the styles a
    model writes (the paper's DocTitle, ``[n]``, bold name with a colon, a name and a dash, a
    possessive, running text with inline ``[n]``, a person not shown, a heading), names drawn
    from the shown people (and five not shown), a description of 4-14 words drawn with
    ``seed``."""
    rng = random.Random(seed)
    context = [
        ContextDocument(title, group=group, text=f"Title: {title}\n{opening}.")
        for title, group, opening in _SHOWN
    ]
    lines: list[str] = []
    seen: set[str] = set()
    written = 0
    while written < size:
        entry = rng.randrange(len(context))
        document = context[entry]
        name = rng.choice(_NOT_SHOWN) if rng.random() < 0.1 else document.person
        words = " ".join(rng.choices(_WORDS, k=rng.randint(4, 14)))
        kind = rng.randrange(8)
        if kind == 0:
            line = f"- {name} (DocTitle: {document.title}): {words}"
        elif kind == 1:
            line = f"{len(lines) % 9 + 1}. **{name}** [{entry + 1}] - {words}"
        elif kind == 2:
            line = f"* **{name}**: {words} [{entry + 1}]"
        elif kind == 3:
            line = f"- {name} - {words}"
        elif kind == 4:
            line = f"- {name}'s {words} (Source: {document.title})"
        elif kind == 5:
            other = rng.randrange(len(context))
            line = (
                f"{name} was known for {words} [{entry + 1}]. {context[other].person} "
                f"{rng.choice(_WORDS)} {words[: len(words) // 2]} [{other + 1}]."
            )
        elif kind == 6:
            line = f"{rng.choice(('Here', 'Below', 'These'))} are role models for {words}:"
        else:
            line = f"- **{name}** – {words} (DocTitle: {document.title})"
        if line in seen:
            continue
        seen.add(line)
        lines.append(line)
        written += len(line) + 1
    return "\n".join(lines) + "\n", context


BOUND = 3.0
"""Issue 33, item 7: attribution within 3x the paper parser's time per MB of answer."""


def timed(call: Callable[[], object]) -> float:
    """CPU seconds of this process for ``call`` (the machine is shared: other processes' load
    moves the wall clock, not this)."""
    start = time.process_time()
    call()
    return time.process_time() - start


def speed_figures(megabytes: float) -> None:
    size = int(megabytes * 2**20)
    print(
        f"\nCPU seconds per MB, the least of 3 runs (answers of {megabytes:g} MB; parse, then "
        "ground against the context, then attribute)"
    )
    ratios: dict[str, float] = {}
    for label, (answer, context) in worst_cases(size).items():
        mb = max(len(answer), *(len(d.title) for d in context)) / 2**20
        parsed = parse_citations(answer)
        parse_s = min(timed(lambda a=answer: parse_citations(a)) for _ in range(3))
        ground_s = min(timed(lambda p=parsed, c=context: ground_citations(p, c)) for _ in range(3))
        attribute_s = min(
            timed(lambda a=answer, c=context: attribute_answer(a, c)) for _ in range(3)
        )
        ratio = attribute_s / max(parse_s, 1e-9)
        ratios[label] = ratio
        print(
            f"  {label:32s} {mb:5.2f} MB  parse {parse_s / mb:7.3f} s/MB  "
            f"ground {ground_s / mb:7.3f} s/MB  attribute {attribute_s / mb:7.3f} s/MB "
            f"({ratio:5.1f}x parse)  "
            f"({len(parsed.citations):,} citations)"
        )
    cited = Citation("Ada " * 75_000 + "Lovelace", "Ada Lovelace", "", 1)
    person = ContextDocument("Ada Lovelace", person="Ada " * 75_000 + "Lovelace")
    seconds = timed(lambda: ground_citations([cited], [person]))
    print(f"  {'300 kB cited name and person':32s} 0.29 MB  ground {seconds / 0.29:7.3f} s/MB")
    print(f"\nattribute / parse, issue 33's bound {BOUND:g}x, on answers whose lines all differ:")
    cases = worst_cases(size)
    for label in ("varied answers", "distinct citation lines"):
        verdict = "within" if ratios[label] <= BOUND else "over"
        answer, context = cases[label]
        parse_s = min(timed(lambda a=answer: parse_citations(a)) for _ in range(3))
        cold = min(timed(lambda a=answer, c=context: cold_attribute(a, c)) for _ in range(3))
        print(
            f"  {label:32s} {ratios[label]:5.1f}x ({verdict} {BOUND:g}x); "
            f"{cold / max(parse_s, 1e-9):5.1f}x with no name decided before"
        )


def cold_attribute(answer: str, context: list[ContextDocument]) -> None:
    """:func:`attribute_answer` as on a context and names never seen: the name decisions
    kept across answers (per context) and the parsed names forgotten first (not timed apart:
    clearing them takes microseconds)."""
    attribution._SHARED.clear()
    citations._parse_short_name.cache_clear()
    attribute_answer(answer, context)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=os.environ.get("FAIRRAG_DATA"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--megabytes", type=float, default=1.0)
    parser.add_argument("--part", choices=("all", "names", "speed"), default="all")
    args = parser.parse_args()
    if args.part == "speed":
        pass
    elif args.data and Path(args.data).is_file():
        documents = load_documents(Path(args.data))
        person_rule_figures(documents, args.seed)
        name_form_figures(documents, args.seed)
    else:
        print("no data (--data or FAIRRAG_DATA): person-rule figures skipped")
    if args.part != "names":
        speed_figures(args.megabytes)


if __name__ == "__main__":
    main()
