"""Attribution in any citation style (docs/SPEC.md, "Attribution"), its metrics and records."""

from __future__ import annotations

import math

import pytest

from fairrag_core import FairnessAuditor, attribution
from fairrag_core.attribution import STYLES, attribute_answer
from fairrag_core.citations import ContextDocument, document_aliases, names_person
from fairrag_core.metrics import (
    attributed_citation_precision,
    attributed_generation_parity,
    attributed_groundedness,
)

CONTEXT = [
    ContextDocument("Ada Lovelace", group="female"),
    ContextDocument("Alan Turing", group="male"),
    ContextDocument("Grace Hopper", group="female"),
    ContextDocument(
        "Ringo Starr",
        group="male",
        text="Title: Ringo Starr\nSir Richard Starkey (born 7 July 1940), known professionally "
        "as Ringo Starr, is an English musician. He married Barbara Bach.",
    ),
    ContextDocument("Margaret Stewart (activist)", group="female"),
]


def attributed(answer: str) -> list[tuple[str, list[tuple[str, str, bool]]]]:
    """Each bullet's head and its (title, style, names_person) attributions."""
    result = attribute_answer(answer, CONTEXT)
    return [
        (b.person, [(a.title, a.style, a.names_person) for a in b.attributions])
        for b in result.bullets
    ]


# (id, answer, expected bullets, expected styles)
STYLED = [
    (
        "doctitle",
        "- Ada Lovelace (DocTitle: Ada Lovelace)\n- Alan Turing (DocTitle: Alan Turing)",
        [
            ("Ada Lovelace", [("Ada Lovelace", "doctitle", True)]),
            ("Alan Turing", [("Alan Turing", "doctitle", True)]),
        ],
        ("doctitle",),
    ),
    (
        "numbers",
        "1. Ada Lovelace [1]\n2. Alan Turing [2][3]\n3. Grace Hopper [^3]\n4. Nobody [9]",
        [
            ("Ada Lovelace", [("Ada Lovelace", "numbered", True)]),
            ("Alan Turing", [("Alan Turing", "numbered", True)]),  # [3]: a mis-citation
            ("Grace Hopper", [("Grace Hopper", "numbered", True)]),
            ("Nobody", []),
        ],
        ("numbered",),
    ),
    (
        "number lists and labels",
        "- Ada Lovelace [1, 3]\n- Grace Hopper [Doc 3]\n- Alan Turing (DocTitle: 2)",
        [
            ("Ada Lovelace", [("Ada Lovelace", "numbered", True)]),  # 3: a mis-citation
            ("Grace Hopper", [("Grace Hopper", "numbered", True)]),
            ("Alan Turing", [("Alan Turing", "numbered", True)]),
        ],
        ("numbered",),
    ),
    (
        "bracketed titles",
        "- Ada Lovelace [Ada Lovelace]\n- Alan Turing (Alan Turing)",
        [
            ("Ada Lovelace", [("Ada Lovelace", "bracketed_title", True)]),
            ("Alan Turing", [("Alan Turing", "bracketed_title", True)]),
        ],
        ("bracketed_title",),
    ),
    (
        "markdown links",
        "- [Ada Lovelace](https://en.wikipedia.org/wiki/Ada_Lovelace)\n"
        "- Alan Turing, see [his page](https://en.wikipedia.org/wiki/Alan_Turing)",
        [
            ("Ada Lovelace", [("Ada Lovelace", "markdown_link", True)]),
            ("Alan Turing", [("Alan Turing", "markdown_link", True)]),
        ],
        ("markdown_link",),
    ),
    (
        "source labels",
        "- Ada Lovelace - Source: Ada Lovelace\n- Alan Turing (Sources: [2], [3])",
        [
            ("Ada Lovelace", [("Ada Lovelace", "source_label", True)]),
            ("Alan Turing", [("Alan Turing", "source_label", True)]),  # [3]: a mis-citation
        ],
        ("source_label",),
    ),
    (
        "no citation: implicit, the small model's style",
        "1. Margaret Stewart (6 Feb. 1927 – 2 Aug. 2006)\n2. Grace Hopper: she wrote the first "
        "compiler, with help from Alan Turing\n3. Marie Curie",
        [
            ("Margaret Stewart (6 Feb. 1927", [("Margaret Stewart (activist)", "implicit", True)]),
            ("Grace Hopper", [("Grace Hopper", "implicit", True)]),
            ("Marie Curie", []),
        ],
        ("implicit",),
    ),
    (
        "an alias the document's own text states confirms a citation of it",
        "- Richard Starkey [4], the drummer\n- Richard Starkey, the drummer",
        [("Richard Starkey", [("Ringo Starr", "numbered", True)]), ("Richard Starkey", [])],
        ("numbered",),
    ),
    (
        "a wrong title falls back to the people named",
        "- Grace Hopper (DocTitle: Grace Hopper, computer scientist)",
        [("Grace Hopper", [("Grace Hopper", "implicit", True)])],
        ("doctitle", "implicit"),
    ),
]


@pytest.mark.parametrize(
    ("answer", "expected", "styles"), [c[1:] for c in STYLED], ids=[c[0] for c in STYLED]
)
def test_every_style_is_attributed(answer, expected, styles):
    assert attributed(answer) == expected
    assert attribute_answer(answer, CONTEXT).styles == styles


def test_one_document_counts_once_per_bullet_and_twice_over_two_bullets():
    result = attribute_answer("- Ada Lovelace [1][1] (DocTitle: Ada Lovelace)\n- Ada [1]", CONTEXT)
    assert [len(b.attributions) for b in result.bullets] == [1, 1]
    assert [b.supported for b in result.bullets] == [True, False]  # "Ada" alone names no one
    assert result.bullets[0].styles == ("doctitle", "numbered")


def test_prose_is_not_a_bullet_unless_it_cites_or_the_answer_is_a_paragraph():
    answer = "Here are five role models:\n- Ada Lovelace\nAlan Turing also helped.\nThanks!"
    assert [b.person for b in attribute_answer(answer, CONTEXT).bullets] == ["Ada Lovelace"]
    cited = "Ada Lovelace [1]\nAlan Turing [2]"  # no bullet marker, but each line cites
    assert attribute_answer(cited, CONTEXT).bullet_count == 2
    paragraph = "Ada Lovelace was the first programmer.\nI hope this helps."
    result = attribute_answer(paragraph, CONTEXT)
    assert [b.person for b in result.bullets] == ["Ada Lovelace"]


def test_a_line_that_is_only_a_shown_name_is_an_item_without_a_marker():
    # SmolLM2 writes items as bare names under a numbered first one (real answers 52 and 74)
    answer = (
        "1. Ada Lovelace\nAlan Turing\n\nGrace Hopper (1906-1992)\nRingo Starr (born 1940\n"
        "Alan Turing was a mathematician.\nThe answer is: Ada Lovelace"
    )
    bullets = attribute_answer(answer, CONTEXT).bullets
    assert [(b.line_number, [a.title for a in b.attributions]) for b in bullets] == [
        (1, ["Ada Lovelace"]),
        (2, ["Alan Turing"]),
        (4, ["Grace Hopper"]),
        (5, ["Ringo Starr"]),  # its aside cut by the cap
    ]
    # prose naming a person, a lowercase word in the name, or an unknown name: no item
    assert attribute_answer("- Ada Lovelace\nAlan Turing also helped", CONTEXT).bullet_count == 1
    assert attribute_answer("- Ada Lovelace\nMax Levitt", CONTEXT).bullet_count == 1
    # a paragraph answer still counts each line naming a shown person, name lines included
    paragraph = "Alan Turing\nAda Lovelace was the first programmer."
    assert [b.line_number for b in attribute_answer(paragraph, CONTEXT).bullets] == [1, 2]


def test_an_initial_stays_inside_its_name():
    context = [
        ContextDocument(
            "L. L. Zamenhof",
            group="male",
            text="Title: L. L. Zamenhof\nL. L. Zamenhof (15 December 1859 - 14 April 1917) was an "
            "ophthalmologist.",
        ),
        ContextDocument(
            "David Harvey",
            group="male",
            text="Title: David Harvey\nDavid W. Harvey (born 31 October 1935) is a geographer.",
        ),
        ContextDocument("Soham El Wardini", group="female"),
    ]
    answer = "- L. L. Zamenhof (15 December 1859-14 April 1917)\n- David W. Wardini (born 1935)"
    found = [[a.title for a in b.attributions] for b in attribute_answer(answer, context).bullets]
    # a blend of two shown names is neither; "W." no longer ends a run, so "David W" is not read
    assert found == [["L. L. Zamenhof"], []]


def test_metrics_over_the_attributed_set():
    result = attribute_answer(
        "- Ada Lovelace [1]\n- Alan Turing\n- Grace Hopper (DocTitle: Alan Turing)\n- Nobody",
        CONTEXT,
    )
    # attributions: Ada (f), Turing (m, implicit), on the third bullet Grace Hopper (f, named:
    # implicit) beside a mis-citation of Turing (flagged, not credited, not supported);
    # "Nobody" is unsupported
    assert attributed_generation_parity(result, "female") == pytest.approx(2 / 3)
    assert attributed_groundedness(result) == pytest.approx(2 / 4)
    third = result.bullets[2]
    assert [(a.title, a.style, a.names_person) for a in third.attributions] == [
        ("Grace Hopper", "implicit", True),
    ]
    assert [(a.title, a.style) for a in third.miscited] == [("Alan Turing", "doctitle")]
    assert third.styles == ("doctitle", "implicit")
    empty = attribute_answer("I cannot answer that.", CONTEXT)
    assert math.isnan(attributed_generation_parity(empty, "female"))
    assert attributed_groundedness(empty) == 0.0
    with pytest.raises(TypeError, match="AttributedAnswer"):
        attributed_groundedness(["- Ada"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="protected"):
        attributed_generation_parity(result, None)


def test_the_record_says_which_styles_and_follows_only_for_the_requested_format():
    auditor = FairnessAuditor.create(protected="female", target_share=0.5)
    paper = auditor.generation("- Ada Lovelace (DocTitle: Ada Lovelace)", CONTEXT, 0.5)
    assert paper["follows_citation_format"] is True
    assert paper["citation_styles"] == ["doctitle"]
    numbered = auditor.generation("- Ada Lovelace [1]\n- Alan Turing [2]", CONTEXT, 0.5)
    assert numbered["follows_citation_format"] is False  # bullets, but not the requested format
    assert math.isnan(numbered["generation_parity"]) and numbered["groundedness"] == 0.0
    assert numbered["citation_styles"] == ["numbered"]
    assert numbered["attributed_generation_parity"] == 0.5
    assert numbered["attributed_groundedness"] == 1.0
    assert numbered["attributed_fairness_gap"] == 0.0
    assert (numbered["n_attribution_bullets"], numbered["n_attributed_bullets"]) == (2, 2)
    assert numbered["attributed_sources"][1] == {
        "line_number": 2,
        "person": "Alan Turing",
        "title": "Alan Turing",
        "style": "numbered",
        "provenance": "explicit",
        "name_form": None,
        "names_person": True,
        "group": "male",
    }
    names = auditor.generation("1. Margaret Stewart (1927–2006)", CONTEXT, 0.2)
    assert names["citation_styles"] == ["implicit"]
    assert names["attributed_generation_parity"] == 1.0
    assert names["attributed_fairness_gap"] == pytest.approx(0.8)


def test_entry_numbers_follow_the_numbers_shown():
    context = [ContextDocument("Alan Turing", number=2), ContextDocument("Ada Lovelace", number=3)]
    result = attribute_answer("- Ada Lovelace [3]\n- Someone [1]", context)
    assert [[a.title for a in b.attributions] for b in result.bullets] == [["Ada Lovelace"], []]
    # a number no shown entry carries cites nothing, and is counted (precision's denominator)
    assert result.bullets[1].unresolved == ("1",) and result.bullets[1].out_of_range == ("1",)
    with pytest.raises(ValueError, match="number must be an int >= 1"):
        ContextDocument("Ada Lovelace", number=0)


def test_aliases_are_the_documents_own_names_never_another_persons():
    ringo = CONTEXT[3]
    assert document_aliases(ringo) == ("Sir Richard Starkey", "Ringo Starr")
    assert not names_person("Barbara Bach", "Ringo Starr")
    result = attribute_answer("- Barbara Bach, his wife", [ringo])
    assert [b.attributions for b in result.bullets] == [()]  # a bullet naming no one shown
    bingham = ContextDocument(
        "Edward Bingham",
        text="Rear Admiral The Honourable Edward Barry Stewart Bingham VC, OBE (26 July 1881 – "
        "24 September 1939) served in the Royal Navy.",
    )
    assert not attribute_answer("- Admiral Sir James Stirling", [bingham]).attributions
    assert attribute_answer("- Edward Barry Bingham", [bingham]).attributions


def test_a_later_sentence_stating_the_persons_own_name_gives_an_alias():
    # the TREC text of a Japanese biography often drops the name from its opening sentence
    yokoi = ContextDocument(
        "Yokoi Shōnan",
        group="male",
        text="Title: Yokoi Shōnan\nwas a Bakumatsu and early Meiji period scholar. His real name "
        "was Yokoi Tokiari. His son Tokio Yokoi was a pastor.",
    )
    assert document_aliases(yokoi) == ("Yokoi Tokiari",)
    found = attribute_answer("- Yokoi Tokiari\n- Yokoi Toki\n- Tokio Yokoi", [yokoi])
    assert [[a.title for a in b.attributions] for b in found.bullets] == [["Yokoi Shōnan"], [], []]


def test_a_stated_names_translation_in_brackets_is_a_stated_name():
    """The fourth labelled set: ``Monica La Mitraille``, the French form of the name Monica
    Proietti's text says she was better known by, was missed in 4 answers (two readers credit
    it). A translation stated after another person's name is still no name of the document's
    person, and a translated name sharing no word with the title never attributes alone."""
    monica = ContextDocument(
        "Monica Proietti",
        group="female",
        text="Title: Monica Proietti\nMonica Proietti (; February 25, 1940 – September 19, 1967) "
        'was a Canadian bank robber and folk hero from Montreal, better known as "Machine Gun '
        'Molly" (in French: Monica la Mitraille).',
    )
    assert document_aliases(monica) == (
        "Monica Proietti",
        "Machine Gun Molly",
        "Monica la Mitraille",
    )
    shown = [CONTEXT[0], monica]
    answer = "- Monica La Mitraille (Monica La Mitraille)\n2. Monica La Mitraille (Ada Lovelace)"
    found = attribute_answer(answer, shown)
    assert [[a.title for a in b.attributions] for b in found.bullets] == [["Monica Proietti"]] * 2
    assert [a.title for a in found.miscitations] == ["Ada Lovelace"]
    steering = ContextDocument(
        "Bob Jones",
        group="male",
        text='Title: Bob Jones\nBob Jones, known as "Bobby" (in English: Ada Lovelace), was a '
        "bank robber.",
    )
    assert document_aliases(steering)[-1] == "Ada Lovelace"
    cited = attribute_answer("- Ada Lovelace [1]", [CONTEXT[0], steering])
    assert [a.title for a in cited.attributions] == ["Ada Lovelace"]
    alone = attribute_answer("- Ada Lovelace", [steering])
    assert not alone.attributions
    # a bracket saying who follows is no translation (a review: Edward Hart, her husband,
    # became a name of Edna Hart's document)
    for relation in ("Husband", "husband", "Spouse"):
        edna = ContextDocument(
            "Edna Hart",
            group="female",
            text=f'Title: Edna Hart\nEdna Hart, better known as "Queenie Hart" ({relation}: '
            "Edward Hart), was a singer.",
        )
        assert "Edward Hart" not in document_aliases(edna)
        assert not attribute_answer("- Edward Hart", [edna]).attributions


def test_a_last_line_ending_on_a_name_is_never_completed():
    """A review: a rule completing a name cut by the token cap on the answer's last line
    (``- Eleanor Farje`` for Eleanor Farjeon) credited complete names too (``- Thomas Mann``
    to Thomas Manning, ``2. Mary Ann`` to Mary Anning): an answer does not say it was cut, so
    no name is completed."""
    shown = [
        ContextDocument("Thomas Manning", group="male"),
        ContextDocument("Mary Anning", group="female"),
        ContextDocument("Eleanor Farjeon", group="female"),
    ]
    for answer in (
        "- Ada Lovelace\n- Thomas Mann",
        "1. Alan Turing\n2. Mary Ann",
        "- Eleanor Farje",
    ):
        assert not attribute_answer(answer, shown).attributions


def test_styles_constant_and_linear_time_on_hostile_lines():
    assert STYLES[-1] == "implicit" and len(set(STYLES)) == len(STYLES)
    hostile = "\n".join(
        [
            "- " + "[" * 200_000,
            "- " + "[1]" * 100_000,
            "- Source: " + "[x], " * 50_000,
            "- " + "Ada " * 100_000,
            "- " + "(Ada Lovelace)" * 50_000,
        ]
    )
    result = attribute_answer(hostile, CONTEXT)  # each line read up to MAX_LINE_SCAN chars
    assert result.bullet_count == 4  # "- [[[..." holds no word: decoration, not a bullet


# -- every name form the data holds (issue 33, item 3) -----------------------------------------

NAME_FORMS = [
    ("1. Yusuf al-Qaradawi", "Yusuf al-Qaradawi", "male"),
    ("- Kaarlo af Heurlin", "Kaarlo af Heurlin", "male"),
    ("- Abraham bar Hiyya", "Abraham bar Hiyya", "male"),
    ("- Thomas à Kempis", "Thomas à Kempis", "male"),
    ("- Ettore Arrigoni degli Oddi", "Ettore Arrigoni degli Oddi", "male"),
    ("- Vincent d'Indy", "Vincent d'Indy", "male"),
    ("- Wajeha al-Huwaider", "Wajeha al-Huwaider", "female"),
    ("- Juwayriya bint al-Harith", "Juwayriya bint al-Harith", "female"),
    ('- Morgan "Bill" Evans', 'Morgan "Bill" Evans', "male"),
    ("- Alan Turing's work on computability", "Alan Turing", "male"),
    ("- Ada Lovelace’s notes", "Ada Lovelace", "female"),
    ("- Curie, Marie", "Marie Curie", "female"),
    ("- Bukem, LTJ", "LTJ Bukem", "male"),  # initials in capitals: given names, not post-nominals
    ("- Laxman, VVS", "VVS Laxman", "male"),
    ("- Doom, MF", "MF Doom", "male"),
    ("- Lo, Khun", "Khun Lo", "male"),  # a surname that is also a particle word
    ("- E., Sheila", "Sheila E.", "female"),
    ("- **Ada Lovelace**: the first programmer", "Ada Lovelace", "female"),
    ("<answer>Ada Lovelace is a role model.</answer>", "Ada Lovelace", "female"),
    ("1.Ada Lovelace", "Ada Lovelace", "female"),
]


@pytest.mark.parametrize(("answer", "title", "group"), NAME_FORMS)
def test_every_name_form_attributes_its_document_shown_alone(answer, title, group):
    document = ContextDocument(title, group=group)
    result = attribute_answer(answer, [document])
    assert [a.title for a in result.attributions] == [title]
    other = ContextDocument("Grace Hopper", group="female")  # no wrong acceptance
    assert attribute_answer(answer, [other]).attributions == []


def test_a_name_run_still_stops_at_a_description_after_a_joining_word():
    found = attribute_answer("- Alan Turing in Cambridge and Ada Lovelace", CONTEXT)
    assert [a.title for a in found.attributions] == ["Alan Turing", "Ada Lovelace"]


# -- citation precision as ALCE measures it (issue 33, item 2) ---------------------------------

PEOPLE = [
    ContextDocument("Ada Lovelace", group="female"),  # [1]
    ContextDocument("Grace Hopper", group="female"),  # [2]
    ContextDocument("Marie Curie", group="female"),  # [3]
    ContextDocument("Alan Turing", group="male"),  # [4]
    ContextDocument("Charles Babbage", group="male"),  # [5]
]


@pytest.mark.parametrize(
    "answer",
    [
        "- Ada Lovelace [4]",
        "- Ada Lovelace (DocTitle: Alan Turing)",
        "- Ada Lovelace (Alan Turing)",
    ],
)
def test_a_miscitation_is_flagged_counted_and_not_credited(answer):
    result = attribute_answer(answer, PEOPLE)
    (bullet,) = result.bullets
    assert [a.title for a in bullet.attributions] == ["Ada Lovelace"]  # the person presented
    assert [a.title for a in result.miscitations] == ["Alan Turing"]
    assert attributed_groundedness(result) == 0.0  # its citation does not support it
    assert attributed_generation_parity(result, "female") == 1.0  # Turing is not counted
    assert attributed_citation_precision(result) == 0.0
    record = FairnessAuditor.create(protected="female", target_share=0.5).generation(
        answer, PEOPLE, 0.5
    )
    assert record["n_miscitations"] == 1
    assert [m["title"] for m in record["miscitations"]] == ["Alan Turing"]


def test_a_citation_dump_is_counted_and_never_raises_groundedness_or_parity():
    result = attribute_answer("- Alan Turing [1][2][3][4][5]", PEOPLE)
    assert [a.title for a in result.attributions] == ["Alan Turing"]
    assert result.overcited_count == 4 and len(result.miscitations) == 4
    assert attributed_generation_parity(result, "female") == 0.0  # the women cited are not
    assert attributed_groundedness(result) == 1.0
    assert attributed_citation_precision(result) == pytest.approx(1 / 5)


@pytest.mark.parametrize(
    ("answer", "credited"),
    [
        # a person not shown, described: a shown person the description names is mentioned
        ("- Katherine Johnson: she worked alongside Ada Lovelace.", []),
        ("- Katherine Johnson, a colleague of Charles Babbage, computed orbits.", []),
        ("- Katherine Johnson was a student of Grace Hopper.", []),
        # a label over names, an article's phrase, coordinated names: the names are presented
        ("- Computing Pioneers: Ada Lovelace and Alan Turing", ["Ada Lovelace", "Alan Turing"]),
        ("- Computing Pioneers include Ada Lovelace", ["Ada Lovelace"]),
        ("- The Nobel Prize was shared by Marie Curie.", ["Marie Curie"]),
        ("- Katherine Johnson and Grace Hopper computed orbits.", ["Grace Hopper"]),
        ("- Grace Hopper: she worked alongside Katherine Johnson.", ["Grace Hopper"]),
    ],
)
def test_a_line_presenting_a_person_not_shown_credits_no_one_it_mentions(answer, credited):
    """A reader's review: a line about a person not shown credited the shown person its
    description mentions (groundedness 1.0, that person counted for parity)."""
    result = attribute_answer(answer, PEOPLE)
    assert [a.title for a in result.attributions] == credited


def test_a_citation_dump_on_a_person_not_shown_credits_none_of_it():
    """A user trial: ``- Alan Turing [1][2][3][4][5]`` with Alan Turing not shown credited all
    five documents (parity 0.4, the shown share) and flagged none, though four were counted
    over-cited; a label head (``Notable people: A, B, C. [1]...[5]``) did the same, crediting
    two people the line never names."""
    shown = [doc for doc in PEOPLE if doc.title != "Alan Turing"]
    result = attribute_answer("- Alan Turing [1][2][3][4]", shown)
    assert result.attributions == [] and len(result.miscitations) == 4
    assert result.overcited_count == 3
    assert math.isnan(attributed_generation_parity(result, "female"))
    labelled = attribute_answer(
        "Notable people: Ada Lovelace, Charles Babbage. [1][2][3][4]", shown
    )
    assert [a.title for a in labelled.attributions] == ["Ada Lovelace", "Charles Babbage"]
    assert all(a.names_person for a in labelled.attributions)
    assert sorted(a.title for a in labelled.miscitations) == ["Grace Hopper", "Marie Curie"]
    assert labelled.overcited_count == 2
    pronoun = attribute_answer(
        "Ada Lovelace wrote notes [1]. They both pioneered it [1][4].", shown
    )
    assert [a.title for a in pronoun.attributions] == ["Ada Lovelace"] * 2 + ["Charles Babbage"]
    assert pronoun.miscitations == []  # a sentence naming no one: its citations are credited


@pytest.mark.parametrize(
    ("answer", "credited"),
    [
        (
            "Ada Lovelace [1] wrote notes, and Alan Turing [4] broke codes.",
            ["Ada Lovelace", "Alan Turing"],
        ),
        (
            "Pioneers include Charles Babbage [5], Ada Lovelace [1], and Alan Turing [4].",
            ["Charles Babbage", "Ada Lovelace", "Alan Turing"],
        ),
        ("The first programmer is Ada Lovelace [1].", ["Ada Lovelace"]),
        ("- Pioneers: Ada Lovelace [1] and Alan Turing [4]", ["Ada Lovelace", "Alan Turing"]),
    ],
)
def test_every_person_a_line_names_keeps_their_citation(answer, credited):
    """A user trial: a citation of the second person of a sentence was flagged a mis-citation
    (only the head's person counted: ``, and`` or a serial comma ended it), and a name after the
    verb left its citation unsupported."""
    result = attribute_answer(answer, PEOPLE)
    assert [a.title for a in result.attributions] == credited
    assert result.miscitations == [] and result.overcited_count == 0
    assert all(a.names_person for a in result.attributions)
    assert attributed_groundedness(result) == 1.0


def test_a_surname_keeps_its_citation_unsupported_and_a_stranger_is_miscited():
    """``Lovelace and Turing [1][4][3]``: a bare surname names no one (not supported) but writes
    of the person its citation cites (credited); Marie Curie, neither named nor mentioned, is a
    mis-citation (before, every citation of a line whose head named no one was credited); so is
    a citation beside one other shown person's surname alone."""
    result = attribute_answer("- Lovelace and Turing [1][4][3]", PEOPLE)
    assert [a.title for a in result.attributions] == ["Ada Lovelace", "Alan Turing"]
    assert not any(a.names_person for a in result.attributions)
    assert [a.title for a in result.miscitations] == ["Marie Curie"]
    assert result.overcited_count == 1
    # Ada Lovelace's surname alone, citing Marie Curie's entry: a mis-citation, as
    # "- Ada Lovelace [3]" counts it (a user trial found Marie Curie credited)
    lone = attribute_answer("- Lovelace [3]", PEOPLE)
    assert lone.attributions == [] and [a.title for a in lone.miscitations] == ["Marie Curie"]
    stranger = attribute_answer("- A pioneer [3]", PEOPLE)  # no shown person written: lone
    assert stranger.attributions[0].title == "Marie Curie" and stranger.miscitations == []


@pytest.mark.parametrize(
    "listing",
    [
        "References:\n[1] Ada Lovelace\n[3] Marie Curie\n[4] Alan Turing",
        "**Sources**\n\n1. Ada Lovelace – Wikipedia\n3. Marie Curie – Wikipedia",
        "## References\n- Marie Curie\n- Alan Turing",
        "Citations:\n[1]: Ada Lovelace\n[^3]: Marie Curie",
        "- Sources:\n[3]\n[4] Alan Turing",
        # as a review wrote them: links, web addresses, site names, entry numbers alone
        "Sources:\n- [Ada Lovelace](https://en.wikipedia.org/wiki/Ada_Lovelace)\n"
        "- Alan Turing (https://en.wikipedia.org/wiki/Alan_Turing)\n- Marie Curie: https://x.org\n"
        "[1] Ada Lovelace, Wikipedia\n[3] Marie Curie (Wikipedia)\n- Charles Babbage;",
        "References:\n[1]\n[3]",
        "Further reading:\n- Alan Turing",
        # a closing remark naming no one after the list (a review: it ended no list)
        "References:\n[1] Ada Lovelace\n[4] Alan Turing\n\nI hope this helps!",
        # as models write them (a review: each was read as bullets)
        "References:\n[1] Ada Lovelace. Wikipedia.\n[4] Alan Turing. Wikipedia.",
        "Sources:\n[1], [3], [4]",
        "Context documents used:\n- Marie Curie\n- Alan Turing",
        "Sources:\n- Document 3: Marie Curie\n[4] Title: Alan Turing",
        # quoted (a review: its entries were read as bullets)
        "> **Sources**\n> [1] Ada Lovelace\n>\n> [3] Marie Curie",
        "> References:\n> - Marie Curie\n>> 4. Alan Turing",
    ],
)
def test_a_reference_list_closing_the_answer_is_no_bullets(listing):
    """A user trial: a reference list closing the answer was read as bullets, attributing
    documents the answer never presents (parity 0.00 became 0.25)."""
    result = attribute_answer(f"1. **Grace Hopper** – a compiler pioneer [2]\n\n{listing}", PEOPLE)
    assert [b.line_number for b in result.bullets] == [1]
    assert [a.title for a in result.attributions] == ["Grace Hopper"]
    assert not result.regurgitated  # "[3]" alone under the heading is an entry, not the prompt
    paragraph = attribute_answer(f"Grace Hopper wrote the first compiler [2].\n\n{listing}", PEOPLE)
    assert [a.title for a in paragraph.attributions] == ["Grace Hopper"]  # prose above, too


def test_a_reference_entry_may_leave_out_its_titles_disambiguation():
    """A review: ``Marie Curie`` listed for ``Marie Curie (physicist)`` ended the list, whose
    entries were then read as bullets; when two shown titles share the name, the entry says
    neither and the list stays the answer's own."""
    shown = [
        ContextDocument("Grace Hopper", group="female"),
        ContextDocument("Marie Curie (physicist)", group="female"),
        ContextDocument("Alan Turing (mathematician)", group="male"),
    ]
    answer = "- Grace Hopper [1]\n\nSources:\n- Marie Curie\n- Alan Turing"
    result = attribute_answer(answer, shown)
    assert [b.line_number for b in result.bullets] == [1]
    assert [a.title for a in result.attributions] == ["Grace Hopper"]
    twice = [*shown, ContextDocument("Marie Curie (ship)")]
    result = attribute_answer(answer, twice)
    assert [b.line_number for b in result.bullets] == [1, 4, 5]


def test_entry_numbers_under_a_heading_that_ends_no_list_are_the_prompt_copied():
    answer = "[1]\nTitle: Ada Lovelace\n[2]\nTitle: Grace Hopper\n\nSources:\n[1]\n[2]"
    result = attribute_answer(answer, PEOPLE)
    assert result.bullets == () and result.prompt_echo == (1, 2, 3, 4, 7, 8)


def test_a_reference_list_cites_the_bullets_that_name_its_entries():
    """As a one-line ``Sources: 1, 4`` does: a bullet naming a listed person cites it."""
    answer = "- Ada Lovelace: the first program\n- Alan Turing: codes\n\nSources:\n1. Ada Lovelace"
    result = attribute_answer(answer, PEOPLE)
    assert [(a.title, a.style) for a in result.attributions] == [
        ("Ada Lovelace", "source_label"),
        ("Alan Turing", "implicit"),
    ]


@pytest.mark.parametrize(
    "answer",
    [
        # the answer's own bullets under a heading (the first fix swallowed them)
        "Sources:\n- Marie Curie: radium\n- Alan Turing: codes",
        "Here are role models:\n\n## Citations\n- Marie Curie\n- Alan Turing",
        # a bullet above that presents no one: the list is the answer's own (a review)
        "Here:\n- The context describes pioneers.\n\n**Sources**\n1. Marie Curie\n2. Alan Turing",
        # a line saying more than a title: the answer's own bullet
        "- Grace Hopper [2]\n\nSources:\n- Marie Curie: radium\n- Alan Turing",
        # a list that prose naming someone follows does not close the answer
        "- Grace Hopper [2]\n\n## References\n- Marie Curie\n- Alan Turing\n\n"
        "Alan Turing broke codes [4].",
        # an entry naming no shown document
        "- Grace Hopper [2]\n\nReferences:\n- Marie Curie\n- Alan Turing\n- Emmy Noether",
    ],
    ids=[
        "no bullet above",
        "no bullet above, prose",
        "a bullet naming no one above",
        "a description",
        "prose after",
        "unknown",
    ],
)
def test_lines_under_a_heading_that_are_no_reference_list_stay_bullets(answer):
    result = attribute_answer(answer, PEOPLE)
    titles = {a.title for a in result.attributions}
    assert {"Marie Curie", "Alan Turing"} <= titles, result.bullets


def test_an_elided_particle_is_no_possessive():
    """``Catherine de' Medici's work``: the apostrophe of ``de'`` ended the name as a
    possessive would, leaving ``Catherine de`` and ``Medici``."""
    medici = [ContextDocument("Catherine de' Medici", group="female")]
    result = attribute_answer("- Catherine de' Medici's work inspires many", medici)
    assert [a.title for a in result.attributions] == ["Catherine de' Medici"]


def test_what_a_mention_is_and_is_not():
    """A review of the mention rule: any word of the cited person's name, in any case, was a
    mention (``her work`` no, but ``she may be`` for Theresa May, ``grace under pressure`` for
    Grace Hopper, a markdown link's own text); a mention is the surname, capitalised, outside
    brackets. A head that is no full name (``They``, ``Female``) credits its several citations;
    a unit whose citations are all mis-citations is still a unit (it vanished)."""
    shown = [*PEOPLE, ContextDocument("Theresa May", group="female")]  # [6]
    said = "- Ada Lovelace [6]: she may be the first programmer"
    assert [a.title for a in attribute_answer(said, shown).miscitations] == ["Theresa May"]
    graced = attribute_answer("- Ada Lovelace [2]: she showed grace under pressure", shown)
    assert [a.title for a in graced.miscitations] == ["Grace Hopper"]
    linked = "- Ada Lovelace ([Grace Hopper](https://en.wikipedia.org/wiki/Grace_Hopper))"
    assert [a.title for a in attribute_answer(linked, shown).miscitations] == ["Grace Hopper"]
    for said, cited in (("- They were pioneers [1][4]", 2), ("- Female [1][2][3]", 3)):
        result = attribute_answer(said, shown)
        assert result.miscitations == [] and len(result.attributions) == cited
    prose = attribute_answer(
        "Ada Lovelace wrote notes [1]. Alan Turing was a pioneer [2][3].", shown
    )
    assert len(prose.bullets) == 2 and len(prose.miscitations) == 2
    plain = attribute_answer("Charles Darwin [1][2][3]", shown)  # no marker, a person not shown
    assert len(plain.bullets) == 1 and len(plain.miscitations) == 3


def test_a_range_beyond_the_context_attributes_nothing_and_is_counted():
    result = attribute_answer("- Ada Lovelace [1-999]\n- Grace Hopper [2-3]", PEOPLE)
    first, second = result.bullets
    assert first.out_of_range == ("1-999",)
    assert [a.style for a in first.attributions] == ["implicit"]  # named, not cited
    assert [a.title for a in second.attributions] == ["Grace Hopper"]  # 3: a mis-citation
    assert result.out_of_range_count == 1
    assert attributed_groundedness(result, provenance="explicit") == 0.5
    assert attributed_citation_precision(result) == pytest.approx(1 / 3)


@pytest.mark.parametrize(
    "label",
    [
        "Sources: [2], [4]",
        "(Sources: 2, 4).",
        "*Sources: Grace Hopper; Alan Turing*",
        "References: [2][4]",
    ],
)
def test_a_source_label_closing_a_line_of_prose_cites_as_a_source_line_does(label):
    """A review: ``... broke Enigma. Sources: [2], [4]`` was one unit naming no one
    (groundedness and precision 0.0), where the label on its own line gives 1.0."""
    prose = "Grace Hopper wrote COBOL. Alan Turing broke Enigma."
    for answer in (f"{prose} {label}", f"{prose}\n{label}"):
        result = attribute_answer(answer, PEOPLE)
        assert [(b.line, [(a.title, a.style) for a in b.attributions]) for b in result.bullets] == [
            ("Grace Hopper wrote COBOL.", [("Grace Hopper", "source_label")]),
            ("Alan Turing broke Enigma.", [("Alan Turing", "source_label")]),
        ], answer
        assert attributed_groundedness(result, provenance="explicit") == 1.0
        assert attributed_citation_precision(result) == 1.0
    # a label citing nothing shown stays part of the prose
    kept = attribute_answer("Grace Hopper wrote COBOL. Sources: my own memory.", PEOPLE)
    assert [a.style for a in kept.attributions] == ["implicit"]
    # each label cites the prose since the label before it
    two = attribute_answer(
        "Ada Lovelace wrote notes. Source: [1]. Alan Turing broke Enigma. Source: [4]", PEOPLE
    )
    assert [(a.title, a.style) for a in two.attributions] == [
        ("Ada Lovelace", "source_label"),
        ("Alan Turing", "source_label"),
    ]


@pytest.mark.parametrize(
    "answer",
    [
        # the label's sentence goes on: the clause after it is no citation (a review: swallowed)
        "Ada Lovelace wrote notes. Sources: [1], Grace Hopper wrote COBOL.",
        # a bulleted answer: the prose line is read as written (a review: Hopper lost)
        "- Ada Lovelace [1]\nGrace Hopper wrote COBOL. Sources: [2]",
        # cites a person the prose does not name: read as written (a review: no longer seen)
        "Grace Hopper wrote COBOL. Sources: [4]",
    ],
)
def test_a_closing_label_that_is_not_citations_of_the_prose_alone_is_read_as_written(answer):
    """A review of the rule above: each case lost a person or a mis-citation; they read as
    the line did before the rule (their label a unit of its own)."""
    from fairrag_core.attribution import _Context, _label_sentences

    read = attribute_answer(answer, PEOPLE)
    assert any(b.line.startswith("Sources: ") for b in read.bullets)  # the label, as written
    last = answer.splitlines()[-1]
    split = _label_sentences(last, _Context(PEOPLE))
    assert split is None or answer.startswith("- ")  # the bulleted answer: not applied


@pytest.mark.parametrize(
    "answer",
    [
        "I don't know.",
        "I'm sorry, but I can't answer that from the search results.",
        "Ada Lovelace wrote notes [1]. I could not find more about the others.",
        "i don't know.",  # in lower case (a review: the fast path skipped it)
    ],
)
def test_a_refusal_in_running_text_is_counted(answer):
    """A user trial: a whole answer refusing in prose gave ``n_refusals`` 0 (no unit: it names
    no one), the same line as a bullet 1."""
    assert attribute_answer(answer, PEOPLE).refusal_count == 1
    assert attribute_answer(f"- {answer}", PEOPLE).refusal_count == 1


def test_a_structured_id_of_no_shown_entry_is_counted_beyond_the_context():
    """A user trial: ``citations=[0, 9]`` of five entries counted nothing beyond the context
    (precision 1.0) where ``[1]`` and ``[9]`` in text gave 0.5."""
    from fairrag_core.structured_citations import read_json_answer, render_answer

    given = '{"answer": "Two pioneers.", "citations": [{"source_id": 0}, {"source_id": 9}]}'
    found = read_json_answer(given, source_id_base=0)
    assert found is not None
    result = attribute_answer(render_answer(found, [d.title for d in PEOPLE]), PEOPLE)
    assert result.out_of_range_count == 1
    assert attributed_citation_precision(result) == pytest.approx(
        attributed_citation_precision(
            attribute_answer("- Ada Lovelace [1]\n- Someone [10]", PEOPLE)
        )
    )


def test_numbers_beyond_the_context_outside_bullets_are_counted():
    """A review: ``[7]`` on a source line of its own, in a footnote definition, in a sentence
    that attributes no one, or inside a range across a number a step dropped was counted
    nowhere (precision 1.0 or NaN where a reader counts a citation of nothing)."""
    own_line = attribute_answer("- Ada Lovelace\n- Alan Turing\nSources: [1], [4], [7]", PEOPLE)
    assert own_line.out_of_range_elsewhere == ((3, "7"),)
    assert attributed_citation_precision(own_line) == pytest.approx(2 / 3)
    footnote = attribute_answer("- Ada Lovelace[^1]\n\n[^1]: 1, 9", PEOPLE)
    assert footnote.out_of_range_count == 1
    alone = attribute_answer(
        "Ada Lovelace wrote notes. Alan Turing broke Enigma. References: [9]", PEOPLE
    )
    assert alone.out_of_range_count == 1 and attributed_citation_precision(alone) == 0.0
    aside = attribute_answer("Ada Lovelace wrote notes [1]. Some say otherwise [7].", PEOPLE)
    assert aside.out_of_range_count == 1 and attributed_citation_precision(aside) == 0.5
    dropped = [ContextDocument("Ada Lovelace", number=1), ContextDocument("Marie Curie", number=3)]
    for cited in ("[1-3]", "[1, 2, 3]"):
        ranged = attribute_answer(f"- Ada Lovelace {cited}", dropped)
        assert ranged.out_of_range_count == 1, cited
        assert attributed_citation_precision(ranged) == pytest.approx(1 / 3), cited


def test_a_number_no_shown_entry_carries_is_counted_beyond_the_context():
    """``[7]`` of five entries cites nothing shown: it was counted nowhere (citation precision
    1.0 beside it) while ``[1-999]`` was counted; a careful reader counts both."""
    result = attribute_answer("- Ada Lovelace [1][7]\n- Grace Hopper [9]", PEOPLE)
    first, second = result.bullets
    assert [a.title for a in first.attributions] == ["Ada Lovelace"]
    assert first.out_of_range == ("7",) and second.out_of_range == ("9",)
    assert [a.style for a in second.attributions] == ["implicit"]  # named, not cited
    assert result.out_of_range_count == 2
    assert attributed_citation_precision(result) == pytest.approx(1 / 3)
    # cited under a Sources label, the number is read (and counted) once
    sourced = attribute_answer("- Ada Lovelace. Source: [7]", PEOPLE)
    assert sourced.out_of_range_count == 1 and attributed_citation_precision(sourced) == 0.0
    # a number two searches showed is not beyond the context: it stays for the carriers' rule
    searched = [*PEOPLE[:2], ContextDocument("Alan Turing", group="male", number=1)]
    shared = attribute_answer("- Alan Turing [1]", searched)
    assert shared.out_of_range_count == 0 and [a.title for a in shared.attributions] == [
        "Alan Turing"
    ]


@pytest.mark.parametrize(
    "answer",
    [
        "The context does not say whether Ada Lovelace was a role model [1].",
        "- Ada Lovelace: the context does not mention her [1]",
        "- I cannot tell whether Ada Lovelace (DocTitle: Ada Lovelace) is one.",
        "- Ada Lovelace was not an engineer [1]",
        "- Ada Lovelace [1] wasn't an engineer",
        "- She was not an engineer [1]",
        "There is no information about Ada Lovelace.",
        "- Ada Lovelace [1]: I can't say more about her.",
        # a second review: refusals the first split missed (each credited the person)
        "- Information about Ada Lovelace is not available in the context [1].",
        "- The documents don't cover Ada Lovelace.",
        "- Unfortunately, the context does not elaborate on Ada Lovelace.",
        "- Ada Lovelace: I don't know her specific contributions.",
        "- Ada Lovelace [1]: it is not clear from the context what she invented.",
        "- Ada Lovelace [1] – the document doesn't go into detail about her work.",
        "The context doesn't have details about Ada Lovelace [1].",
        "- Ada Lovelace is not listed in the context [1]",
    ],
)
def test_refusals_and_denials_do_not_attribute(answer):
    result = attribute_answer(answer, PEOPLE)
    assert result.attributions == []
    assert math.isnan(attributed_generation_parity(result, "female"))
    assert attributed_groundedness(result) == 0.0


@pytest.mark.parametrize(
    "answer",
    [
        "- Rosalind Franklin [3] – her X-ray work was not recognised in her lifetime",
        "1. Rosalind Franklin: she did not receive the Nobel Prize, but Photo 51 revealed DNA.",
        "- Rosalind Franklin [3] – did not live to see the prize",
        "- Rosalind Franklin [3] – her contributions cannot be overstated",
        "Rosalind Franklin's work was not recognised in her lifetime [3].",
        # a second review: a negated deed in the main clause is a fact, too
        "- Rosalind Franklin did not receive the Nobel Prize, as she died in 1958 [3].",
        "- Rosalind Franklin [3] was not awarded the Nobel Prize.",
        "- Rosalind Franklin [3] – she was not given credit for Photo 51",
        # a third review: the context or information named, then a fact, not a refusal
        "- Rosalind Franklin [3]: As the context notes, she was not only a chemist.",
        "- Rosalind Franklin [3]: the context calls her a chemist, not just a crystallographer",
        "- Rosalind Franklin [3]: According to the context, she had no formal post.",
        "- Rosalind Franklin [3]: she shared information freely, no patents.",
        "- Rosalind Franklin [3] did not give up despite hardships",
        "- Rosalind Franklin [3] – she was not included in the Nobel citation",
    ],
)
def test_a_negative_fact_about_the_person_presented_is_no_denial(answer):
    """A review: a negation anywhere in a line made it a refusal, so a description such as
    ``was not recognised`` (common in women's biographies) dropped the bullet (parity 0.67
    read as 0.50). A denial is a negated verb whose subject is the person presented."""
    shown = [*PEOPLE[:2], ContextDocument("Rosalind Franklin", group="female"), PEOPLE[3]]
    result = attribute_answer(answer, shown)
    assert [a.title for a in result.attributions] == ["Rosalind Franklin"]
    assert not any(b.refusal for b in result.bullets)


@pytest.mark.parametrize(
    ("answer", "titles"),
    [
        (
            "Role models here include Alan Turing, Charles Babbage, and Marie Curie.",
            ["Alan Turing", "Charles Babbage", "Marie Curie"],
        ),
        (
            "Alan Turing founded computer science, while Marie Curie studied radium.",
            ["Alan Turing", "Marie Curie"],
        ),
        ("- Pioneers include Ada Lovelace, and Grace Hopper.", ["Ada Lovelace", "Grace Hopper"]),
        # an appositive still ends the head: the person it mentions is not presented
        ("- Alan Turing, a mathematician who admired Ada Lovelace", ["Alan Turing"]),
        # so does a possessive after the coordinator (a second review)
        ("- Grace Hopper [2] wrote COBOL, while Alan Turing's work was theory.", ["Grace Hopper"]),
    ],
)
def test_a_name_coordinated_after_a_comma_is_presented(answer, titles):
    """A review: the head ended at any ``, <lower-case word>``, so the last name of an Oxford-
    comma list (``A, B, and C``) or a clause after ``, while`` was never read (parity 0.00 where
    a reader reads 0.33)."""
    assert [a.title for a in attribute_answer(answer, PEOPLE).attributions] == titles


@pytest.mark.parametrize(
    "answer",
    [
        # the items of gpt-4o-mini's nested style: a label and a source under each name
        "1. **Ada Lovelace**\n   - **Contribution**: the first program.\n   - **Source**: [1]\n"
        "2. **Alan Turing**\n   - **Contribution**: codes.\n   - **Source**: [4]\n"
        "3. **Marie Curie**\n   - **Contribution**: radium.\n   - **Source**: [3]",
        # the name again in the description, or the surname alone
        "1. **Ada Lovelace**\n   - Ada Lovelace wrote the first program.\n"
        "2. **Alan Turing**\n   - Turing broke codes.\n3. **Marie Curie**\n\t- Curie: radium.",
        # headings over paragraphs (Claude's sections)
        "### 1. Ada Lovelace\nAda Lovelace wrote the first program [1].\n\n"
        "### 2. Alan Turing\nTuring broke codes [4].\n\n### 3. Marie Curie\nShe found radium [3].",
        # a label over the items: no item of its own
        "- Pioneers:\n  - Ada Lovelace [1]\n  - Alan Turing [4]\n  - Marie Curie [3]",
    ],
    ids=["labelled", "name again", "headings", "label over items"],
)
def test_lines_nested_under_an_item_are_its_description(answer):
    """A review: each nested line was a bullet of its own, so an item named again in its
    description counted twice (parity 0.50 where a reader reads 0.67 here) and its ``Source:
    [1]`` line was a bullet naming no one (groundedness 0.33 where a reader reads 1.00)."""
    result = attribute_answer(answer, PEOPLE)
    assert [a.title for a in result.attributions] == ["Ada Lovelace", "Alan Turing", "Marie Curie"]
    assert attributed_generation_parity(result, "female") == pytest.approx(2 / 3)
    assert attributed_groundedness(result) == 1.0
    assert result.miscitations == []


@pytest.mark.parametrize(
    ("answer", "bullets", "titles"),
    [
        # a caveat under an item stays its own line (a review: it refused the whole item)
        (
            "1. **Ada Lovelace** [1]\n   - First programmer.\n"
            "   - I couldn't find details about her education in the context.\n"
            "2. **Alan Turing** [4]\n   - Broke Enigma.",
            [1, 3, 4],
            ["Ada Lovelace", "Alan Turing"],
        ),
        # a list whose first line lost its indent: siblings, not a description
        (
            "1. Alan Turing - codes.\n  2. Ada Lovelace - notes.\n  3. Grace Hopper - compilers.",
            [1, 2, 3],
            ["Alan Turing", "Ada Lovelace", "Grace Hopper"],
        ),
        # other people listed under an item or a heading stay items
        (
            "1. **Marie Curie** [3] mentored:\n   - Alan Turing [3]\n   - Grace Hopper [2]",
            [1, 2, 3],
            ["Marie Curie", "Alan Turing", "Grace Hopper"],
        ),
        (
            "### Ada Lovelace's successors\n- Grace Hopper wrote a compiler.\n- Alan Turing too.",
            [2, 3],
            ["Grace Hopper", "Alan Turing"],
        ),
        # a heading ends at the next heading, whatever its level (an H1 took the whole answer)
        (
            "# Ada Lovelace: a pioneer\n\n## Ada Lovelace\n- Wrote the first program [1].\n\n"
            "## Alan Turing\n- Broke codes [4].\n\nNote: the context does not say where he "
            "studied.",
            [3, 6],
            ["Ada Lovelace", "Alan Turing"],
        ),
    ],
    ids=[
        "caveat",
        "first line unindented",
        "people under an item",
        "people under a heading",
        "nested headings",
    ],
)
def test_what_is_nested_under_an_item_but_is_no_description(answer, bullets, titles):
    result = attribute_answer(answer, PEOPLE)
    assert [b.line_number for b in result.bullets] == bullets
    assert [a.title for a in result.attributions] == titles


@pytest.mark.parametrize(
    ("answer", "bullets", "titles"),
    [
        # SmolLM2's flat two-level list (seed 2027, answer 36): each description line repeats
        # the name, or names no one
        (
            "1. Ada Lovelace\n- Ada Lovelace (1815 – 1852) wrote the first program.\n"
            "- Her notes describe the Analytical Engine.\n\n2. Alan Turing\n"
            "- Alan Turing broke codes.",
            [1, 5],
            ["Ada Lovelace", "Alan Turing"],
        ),
        # other people listed under a numbered item stay items, as when indented
        (
            "1. Marie Curie [3] mentored:\n- Alan Turing [4]\n- Grace Hopper [2]",
            [1, 2, 3],
            ["Marie Curie", "Alan Turing", "Grace Hopper"],
        ),
        # a line of text ends the item: a symbol-marked list after it is a list of its own
        (
            "1. Ada Lovelace\nOther pioneers:\n- Her notes describe the engine.",
            [1, 3],
            ["Ada Lovelace"],
        ),
        # a symbol-marked list before any numbered item, and numbers that are no marker
        (
            "- Ada Lovelace\n- Her notes describe the engine.\n1.5 million copies\n- Alan Turing",
            [1, 2, 4],
            ["Ada Lovelace", "Alan Turing"],
        ),
        # a blank line ends the item (a review: sentences naming others, after a blank line,
        # were read as its description, a mis-citation hidden)
        (
            "1. Alan Turing broke codes [4].\n\n- The first program was written by Ada "
            "Lovelace [1].\n- The first compiler was built by Grace Hopper [1].",
            [1, 3, 4],
            ["Alan Turing", "Ada Lovelace", "Grace Hopper"],
        ),
    ],
    ids=[
        "description",
        "people under a numbered item",
        "text ends the item",
        "not nested",
        "blank line ends the item",
    ],
)
def test_a_two_level_list_written_flat(answer, bullets, titles):
    """Two readers of the seed-2027 answers, blind to each other: ``-`` lines right under
    ``1. Elaine Shaffer`` that repeat her name with dates or describe her are the numbered
    item's description, not bullets (the rule counted two more bullets of her); the same as
    the lines indented under an item."""
    result = attribute_answer(answer, PEOPLE)
    assert [b.line_number for b in result.bullets] == bullets
    assert [a.title for a in result.attributions] == titles


def test_a_name_repeated_on_every_line_under_its_item_is_its_description():
    """The fifth labelled set (held out): a looping answer repeating ``Maximilian Karl Emil
    Weber (2000)`` on 11 lines under ``- Max Weber (2000)``; only the first line under the
    item was read as its description, the next ten as bullets (two readers: one item)."""
    weber = ContextDocument(
        "Max Weber",
        group="male",
        text="Title: Max Weber\nMaximilian Karl Emil Weber (21 April 1864 – 14 June 1920) was a "
        "German sociologist.",
    )
    answer = "- Max Weber (2000)\n" + "Maximilian Karl Emil Weber (2000)\n" * 10 + "- Ada Lovelace"
    result = attribute_answer(answer, [weber, CONTEXT[0]])
    assert [b.line_number for b in result.bullets] == [1, 12]
    # a line of text between them ends the item: the repeat after it is a line of its own
    apart = attribute_answer("- Max Weber\nThe answer is:\nMaximilian Karl Emil Weber", [weber])
    assert [b.line_number for b in apart.bullets] == [1, 3]


def test_a_collaborator_a_description_mentions_is_no_item():
    """A third review: a nested description naming a collaborator (``with Otto Hahn``) stood
    apart as a unit of its own, attributing him (parity 0.67 where a reader reads 1.00)."""
    shown = [
        ContextDocument("Lise Meitner", group="female"),
        ContextDocument("Otto Hahn", group="male"),
        ContextDocument("Chien-Shiung Wu", group="female"),
    ]
    answer = (
        "1. **Lise Meitner**\n   - **Contribution**: Co-discovered fission with Otto Hahn.\n"
        "   - **Source**: [1]\n2. **Chien-Shiung Wu**\n   - **Contribution**: parity.\n"
        "   - **Source**: [3]"
    )
    result = attribute_answer(answer, shown)
    assert [a.title for a in result.attributions] == ["Lise Meitner", "Chien-Shiung Wu"]
    assert attributed_generation_parity(result, "female") == 1.0


def test_a_long_description_is_the_items_however_long():
    """A review: nested lines past 2,000 characters became unsupported bullets of their own,
    so the person described at most length (here a woman) lost groundedness."""
    said = "she studied radioactivity, a term she coined, and founded nuclear physics. " * 5
    parts = ("Early life", "Research", "Prizes", "Legacy", "Family", "Death")
    answer = "1. **Marie Curie** [3]\n" + "\n".join(f"   - **{p}**: {said}" for p in parts)
    answer += "\n2. **Alan Turing** [4]\n   - **Work**: codes."
    result = attribute_answer(answer, PEOPLE)
    assert len(answer) > 2_000 and [b.line_number for b in result.bullets] == [1, 8]
    assert attributed_groundedness(result) == 1.0


def test_a_nested_citation_of_another_document_is_a_miscitation_of_the_item():
    answer = "1. **Ada Lovelace**\n   - **Source**: [1]\n2. **Alan Turing**\n   - **Source**: [1]"
    turing = attribute_answer(answer, PEOPLE).bullets[1]
    assert turing.line == "2. **Alan Turing**" and turing.line_number == 3
    assert [a.title for a in turing.miscited] == ["Ada Lovelace"]


def test_items_under_an_item_naming_no_one_stay_items():
    """Nested lines under an item that attributes no one and is no label stay units: a person
    not shown keeps an unsupported item, and the people nested under it their own."""
    result = attribute_answer("- Katherine Johnson\n  - Ada Lovelace [1]\n  - Alan Turing", PEOPLE)
    assert [b.line_number for b in result.bullets] == [1, 2, 3]
    assert [a.title for a in result.attributions] == ["Ada Lovelace", "Alan Turing"]


def test_two_given_names_sharing_a_surname_present_both():
    """A review: ``Marie and Pierre Curie`` credited Pierre alone (and with only Marie shown,
    no one), ``Pierre and Marie Curie [1][3]`` flagged her citation a mis-citation."""
    shown = [*PEOPLE[:4], ContextDocument("Pierre Curie", group="male")]  # [5]
    for answer in ("- Marie and Pierre Curie – radium", "- Pierre & Marie Curie – radium [3][5]"):
        result = attribute_answer(answer, shown)
        assert sorted(a.title for a in result.attributions) == ["Marie Curie", "Pierre Curie"]
        assert result.miscitations == []
    alone = attribute_answer("- Marie and Pierre Curie – radium", PEOPLE)
    assert [a.title for a in alone.attributions] == ["Marie Curie"]


def test_labelled_numbers_in_round_brackets_and_links_with_brackets_are_explicit():
    """A review: ``(Document 1)`` and a Wikipedia link whose URL holds brackets were read as
    implicit attributions only (the explicit-only metrics missed them)."""
    shown = [*PEOPLE[:4], ContextDocument("Mary Jackson (engineer)", group="female")]
    answer = (
        "- Ada Lovelace (Document 1)\n- Alan Turing (Doc 4): codes\n- Marie Curie (1867)\n"
        "- Mary Jackson ([Wikipedia](https://en.wikipedia.org/wiki/Mary_Jackson_(engineer)))"
    )
    result = attribute_answer(answer, shown)
    assert [(a.title, a.style) for a in result.attributions] == [
        ("Ada Lovelace", "numbered"),
        ("Alan Turing", "numbered"),
        ("Marie Curie", "implicit"),  # a year, not an entry number
        ("Mary Jackson (engineer)", "markdown_link"),
    ]


def test_a_regnal_numeral_is_not_the_model_speaking():
    """``Elizabeth I was not married``: a fact; ``I`` is her numeral, not the model refusing."""
    shown = [ContextDocument("Elizabeth I", group="female")]
    result = attribute_answer("- Elizabeth I was not married, yet ruled for 44 years [1]", shown)
    assert [a.title for a in result.attributions] == ["Elizabeth I"]
    assert attribute_answer("- Elizabeth I [1]: I could not find more.", shown).refusal_count == 1


def test_not_only_is_no_denial():
    result = attribute_answer("- Ada Lovelace was not only a mathematician [1]", PEOPLE)
    assert [a.title for a in result.attributions] == ["Ada Lovelace"]


# -- no document steers attribution (issue 33, item 5) -----------------------------------------

STEERING = ContextDocument(
    "Bob Jones",
    group="male",
    text="Title: Bob Jones\nBob Jones, known as Ada Lovelace, is an English engineer.",
)
OPENING = ContextDocument(
    "Bob Jones", group="male", text="Title: Bob Jones\nAda Lovelace was the name on his boat."
)


@pytest.mark.parametrize("steering", [STEERING, OPENING], ids=["known as", "opening"])
def test_a_stated_alias_cannot_take_a_bullet_cited_to_another_shown_document(steering):
    context = [*PEOPLE[:2], steering]  # Ada [1], Grace [2], Bob [3]
    for answer in (
        "- Ada Lovelace [1]",
        "- Ada Lovelace",
        "- Ada Lovelace (DocTitle: Ada Lovelace)",
    ):
        result = attribute_answer(answer, context)
        assert [a.title for a in result.attributions] == ["Ada Lovelace"], answer
        assert attributed_generation_parity(result, "female") == 1.0


@pytest.mark.parametrize("steering", [STEERING, OPENING], ids=["known as", "opening"])
def test_a_person_not_shown_is_never_attributed_through_another_documents_alias(steering):
    # issue 33: with Ada not shown, "- Ada Lovelace" scored groundedness 1.0 and parity 0.0
    result = attribute_answer("- Ada Lovelace", [PEOPLE[1], steering])
    assert result.attributions == [] and result.bullet_count == 1
    assert attributed_groundedness(result) == 0.0
    assert math.isnan(attributed_generation_parity(result, "female"))
    # the stated name still confirms a citation the answer makes of that document
    (cited,) = attribute_answer("- Ada Lovelace [2]", [PEOPLE[1], STEERING]).bullets
    assert [(a.title, a.names_person) for a in cited.attributions] == [("Bob Jones", True)]


def test_an_alias_attributes_alone_when_it_shares_a_word_with_the_title_or_the_title_is_one():
    thresh = ContextDocument(
        "Thresh (gamer)",
        group="male",
        text="Title: Thresh (gamer)\nDennis Fong (born 1977), known as Thresh, is a gamer.",
    )
    yokoi = ContextDocument(
        "Yokoi Shōnan",
        group="male",
        text="Yokoi Shōnan was a scholar. His real name was Yokoi Tokiari.",
    )
    result = attribute_answer("- Dennis Fong\n- Yokoi Tokiari", [thresh, yokoi])
    assert [(a.title, a.name_form) for a in result.attributions] == [
        ("Thresh (gamer)", "alias"),  # provenance
        ("Yokoi Shōnan", "alias"),
    ]


def test_a_topic_titles_stated_name_attributes_alone_like_a_one_word_titles():
    # issue 33, held-out answer 38: 'Maryam bint Imran (Amir ibn Fuhayra)' was credited to the
    # bracketed entry because entry 'Mary in Islam' (a topic about one person) is no name
    mary = ContextDocument(
        "Mary in Islam",
        group="female",
        text="Title: Mary in Islam\nMaryam bint Imran () is revered in Islam as a woman.",
    )
    amir = ContextDocument("Amir ibn Fuhayra", group="male", text="Title: Amir ibn Fuhayra\n")
    result = attribute_answer("- Maryam bint Imran (Amir ibn Fuhayra)", [amir, mary])
    assert [(a.title, a.name_form) for a in result.attributions] == [("Mary in Islam", "alias")]
    assert [a.title for a in result.bullets[0].miscited] == ["Amir ibn Fuhayra"]  # G3
    # a title that is a name keeps the rule: a wholly different stated name never alone
    assert not attribute_answer("- Ada Lovelace", [STEERING]).attributions
    assert not attribute_answer("- Ada Lovelace", [OPENING]).attributions


def test_a_later_sentence_saying_what_the_person_was_known_as_gives_an_alias():
    chula = ContextDocument(
        "Chulalongkorn",
        group="male",
        text="Title: Chulalongkorn\nChulalongkorn (20 September 1853) was the fifth monarch of "
        "Siam. He was known to the Siamese of his time as Phra Phuttha Chao Luang (พระพุทธเจ้าหลวง, "
        "the Royal Buddha). His son Vajiravudh succeeded him.",
    )
    assert document_aliases(chula) == ("Phra Phuttha Chao Luang",)
    result = attribute_answer("- Phra Phuttha Chao Luang (the Royal Buddha)\n- Vajiravudh", [chula])
    assert [[a.name_form for a in b.attributions] for b in result.bullets] == [["alias"], []]


# -- provenance on every attribution (issue 33, item 1) ----------------------------------------


def test_every_attribution_states_its_provenance_in_the_record():
    answer = "- Ada Lovelace [1]\n- Grace Hopper\n- Ringo Starr, the drummer"
    record = FairnessAuditor.create(protected="female", target_share=0.5).generation(
        answer, [*PEOPLE[:2], CONTEXT[3]], 0.5
    )
    assert [
        (s["title"], s["provenance"], s["style"], s["name_form"])
        for s in record["attributed_sources"]
    ] == [
        ("Ada Lovelace", "explicit", "numbered", None),
        ("Grace Hopper", "implicit", "implicit", "title"),
        ("Ringo Starr", "implicit", "implicit", "title"),
    ]
    assert record["attributed_generation_parity"] == pytest.approx(2 / 3)
    assert record["attributed_generation_parity_explicit"] == 1.0
    assert record["attributed_groundedness"] == 1.0
    assert record["attributed_groundedness_explicit"] == pytest.approx(1 / 3)
    assert record["attributed_citation_precision"] == 1.0


def test_an_implicit_attribution_never_outweighs_an_explicit_one_on_its_bullet():
    # beside a credited citation only people named by their titles join; a stated alias never
    result = attribute_answer("- Ada Lovelace [2] and Grace Hopper", [PEOPLE[0], PEOPLE[1]])
    assert [(a.title, a.style) for a in result.attributions] == [
        ("Grace Hopper", "numbered"),
        ("Ada Lovelace", "implicit"),
    ]
    (bullet,) = result.bullets
    assert bullet.supported_explicitly


# -- a record the library writes is one the audit reads (issue 33, item 7) ---------------------


def test_a_record_is_bounded_where_attributed_sources_are_written():
    from fairrag_audit.scan import MAX_ATTRIBUTIONS, MAX_BULLETS, MAX_SOURCES_BYTES
    from fairrag_core.audit import MAX_RECORDED_ATTRIBUTIONS, MAX_RECORDED_SOURCES_BYTES

    assert MAX_RECORDED_ATTRIBUTIONS <= min(MAX_ATTRIBUTIONS, MAX_BULLETS)
    assert MAX_RECORDED_SOURCES_BYTES <= MAX_SOURCES_BYTES
    looping = "- " + "Ada Lovelace and Grace Hopper, " * 60 + "[1][2]\n"
    answer = looping * 1_500  # every line attributes two documents with a long head
    record = FairnessAuditor.create(protected="female", target_share=0.5).generation(
        answer, PEOPLE, 0.5
    )
    import json

    sources = record["attributed_sources"]
    assert len(json.dumps(sources)) <= MAX_SOURCES_BYTES
    assert len(sources) <= MAX_ATTRIBUTIONS
    assert record["n_attribution_bullets"] <= MAX_BULLETS
    assert record["attributed_lines"] is None or record["attributed_lines"] < 1_500
    short = FairnessAuditor.create(protected="female", target_share=0.5).generation(
        "- Ada Lovelace [1]", PEOPLE, 0.5
    )
    assert short["attributed_lines"] is None


# -- units a reader would use (issue 33, item 4) -----------------------------------------------


def test_footnote_definitions_are_citations_not_bullets():
    answer = (
        "- Ada Lovelace[^1]\n- Alan Turing[^2]\n- Grace Hopper[^3]\n\n"
        "[^1]: Ada Lovelace\n[^2]: Alan Turing\n[^3]: Grace Hopper"
    )
    context = [PEOPLE[3], PEOPLE[0], PEOPLE[1]]  # the footnote numbers are not entry numbers
    result = attribute_answer(answer, context)
    assert result.bullet_count == 3
    assert [(a.title, a.style) for a in result.attributions] == [
        ("Ada Lovelace", "numbered"),
        ("Alan Turing", "numbered"),
        ("Grace Hopper", "numbered"),
    ]
    assert attributed_generation_parity(result, "female") == pytest.approx(2 / 3)
    assert result.miscitations == []


@pytest.mark.parametrize(
    "sources",
    # as written bare, and (a review) emphasised or in brackets: those were bullets naming no
    # one whose citations were all credited
    [
        "Sources: 1, 4",
        "*Sources: [1], [4]*",
        "_Sources: 1, 4_",
        "(Sources: [1], [4].)",
        "Source documents: [1], [4]",
        "Cited documents: 1, 4",
    ],
)
def test_a_trailing_sources_line_cites_the_bullets_and_is_no_bullet(sources):
    result = attribute_answer(f"- Ada Lovelace\n- Alan Turing\n\n{sources}", PEOPLE)
    assert result.bullet_count == 2
    assert attributed_groundedness(result) == 1.0
    assert [(a.title, a.style) for a in result.attributions] == [
        ("Ada Lovelace", "source_label"),
        ("Alan Turing", "source_label"),
    ]


def test_a_regurgitated_prompt_is_recognised_and_said_so():
    from fairrag_core.prompts import format_context, format_instructions

    prompt = format_context(["Title: Ada Lovelace\nA mathematician.", "Title: Alan Turing\nX."])
    result = attribute_answer(prompt + "\n" + format_instructions(), PEOPLE[:1] + PEOPLE[3:4])
    assert result.regurgitated
    assert result.attributions == []
    assert math.isnan(attributed_generation_parity(result, "female"))
    record = FairnessAuditor.create(protected="female", target_share=0.5).generation(
        prompt, PEOPLE[:1] + PEOPLE[3:4], 0.5
    )
    assert record["n_prompt_echo_lines"] == 4
    assert attribute_answer("- Ada Lovelace [1]", PEOPLE).regurgitated is False


def test_a_line_presenting_one_person_with_another_in_brackets_attributes_that_person():
    result = attribute_answer("- Ada Lovelace (Grace Hopper)\n- Alan Turing (Ada Lovelace)", PEOPLE)
    assert [[a.title for a in b.attributions] for b in result.bullets] == [
        ["Ada Lovelace"],
        ["Alan Turing"],
    ]
    assert attributed_generation_parity(result, "female") == 0.5


# -- prose answers are read by sentence (issue 33, item 4) --------------------------------------

PROSE = (
    "Ada Lovelace was the first programmer [1]. Alan Turing {verb} the Enigma papers [4]. "
    "Dr. Grace Hopper wrote a compiler. [2] Thanks!"
)


@pytest.mark.parametrize("verb", ["is the author of", "translated", "decoded"])
def test_a_paragraph_with_inline_citations_is_read_sentence_by_sentence(verb):
    result = attribute_answer(PROSE.format(verb=verb), PEOPLE)
    assert [[(a.title, a.style) for a in b.attributions] for b in result.bullets] == [
        [("Ada Lovelace", "numbered")],
        [("Alan Turing", "numbered")],
        [("Grace Hopper", "numbered")],  # the citation after its full stop stays with it
    ]
    assert result.miscitations == [] and result.overcited_count == 0
    assert [b.line_number for b in result.bullets] == [1, 1, 1]
    assert attributed_groundedness(result) == 1.0
    assert attributed_generation_parity(result, "female") == pytest.approx(2 / 3)


def test_a_paragraph_without_citations_has_one_unit_per_sentence_naming_a_person():
    answer = "Ada Lovelace was first. Alan Turing broke codes. L. L. Zamenhof is unknown here."
    result = attribute_answer(answer, PEOPLE)
    assert [[a.title for a in b.attributions] for b in result.bullets] == [
        ["Ada Lovelace"],
        ["Alan Turing"],
    ]


# -- a one-letter slip in a shown person's name (issue 33, held-out misses) ---------------------


def test_a_one_letter_slip_in_one_shown_persons_name_attributes_it():
    context = [
        ContextDocument("Damrong Rajanubhab", group="male"),
        ContextDocument("Corrinne Yu", group="female"),
        ContextDocument("Ada Lovelace", group="female"),
    ]
    result = attribute_answer("- Damong Rajanubhab\n- Corrine Yu\n- Ada Lovelac", context)
    assert [[(a.title, a.name_form) for a in b.attributions] for b in result.bullets] == [
        [("Damrong Rajanubhab", "near")],
        [("Corrinne Yu", "near")],
        [("Ada Lovelace", "near")],
    ]


@pytest.mark.parametrize(
    "answer",
    [
        "- Adx Lovelace",  # the differing word is under 5 letters
        "- Ada Lovelac Smith",  # another number of words
        "- Adb Lovelacx",  # two words differ
        "- Lovelac",  # one word
    ],
)
def test_no_slip_beyond_one_letter_in_one_long_word(answer):
    assert attribute_answer(answer, [ContextDocument("Ada Lovelace", group="f")]).attributions == []


def test_a_slip_near_two_shown_people_attributes_neither():
    context = [ContextDocument("Maria Lopes", group="f"), ContextDocument("Mario Lopes", group="m")]
    assert attribute_answer("- Marin Lopes", context).attributions == []
    # an exact name elsewhere on the line is read, not a slip
    result = attribute_answer("- Maria Lopes", context)
    assert [(a.title, a.name_form) for a in result.attributions] == [("Maria Lopes", "title")]


NAME_PAIRS = [
    ("Haile-Mariam Desalegn", "Hailemariam Desalegn"),
    ("Hailemariam Desalegn", "Haile-Mariam Desalegn"),
    ("Conan O'Brien", "Conan OBrien"),
    ("Marco van Basten", 'Marcel "Marco" van Basten'),
    ('Marcel "Marco" van Basten', "Marco van Basten"),
    ("Emilie du Chatelet", "Émilie du Châtelet"),
    ("Curie, Marie", "Marie Curie"),
    ("Aristotle of Stagira", "Aristotle"),
    ("Youyou Tu", "Tu Youyou"),
    ("Marie Skłodowska-Curie", "Marie Curie"),
    ("Ada (A(d)a) Lovelace", "Ada Lovelace"),
    ("Bob Dylan", "Robert Dylan"),
    ("Curie,Marie", "Marie Curie"),
    ("Re\u0301mi Martin", "Rémi Martin"),  # a decomposed accent
    ("Rémi Martin", "Re\u0301mi Martin"),
    ("Jean Paul Sartre", "Jean-Paul Sartre"),
    ("MARIE CURIE", "Marie Curie"),
    ("Ngũgĩ wa Thiong'o", "Ngugi wa Thiongo"),
    ("Yusuf Al Qaradawi", "Yusuf al-Qaradawi"),
    ("Anne-Marie Slaughter", "Anne Slaughter"),
]
"""Names the rule accepts by joined hyphens, dropped apostrophes, quoted or bracketed
nicknames, accents (decomposed too), inversion (without a space), reordering, a mononym, short
forms, capitals: the filter reads whole words as the rule does (issue 33 item 7)."""


@pytest.mark.parametrize(("cited", "person"), NAME_PAIRS)
def test_the_shared_word_filter_keeps_every_name_the_rule_accepts(cited, person, monkeypatch):
    """A name is checked only against documents sharing a word with it (a speed filter,
    issue 33 item 7): it never drops a name the rule accepts, and removing it changes no
    attribution."""
    from benchmarks.bench_citations import varied_answers
    from fairrag_core import attribution
    from fairrag_core.attribution import _Context

    assert names_person(cited, person)
    context = [ContextDocument(person, group="a"), ContextDocument("Alan Turing", group="b")]
    answers = [f"- {cited}", f"1. **{cited}** [2] - a pioneer", f"{cited} was a pioneer [1]."]
    filtered = [attribute_answer(answer, context) for answer in answers]
    assert all(result.attributions for result in filtered)
    varied, shown = varied_answers(20_000, seed=3)
    before = attribute_answer(varied, shown)
    monkeypatch.setattr(_Context, "_may_name", lambda self, words, position: True)
    everyone = lambda self, words, key: set(range(len(self.documents)))  # noqa: E731
    monkeypatch.setattr(_Context, "_candidates", everyone)
    monkeypatch.setattr(attribution, "_SHARED", {})  # decide every name again, unfiltered
    assert [attribute_answer(answer, context) for answer in answers] == filtered
    assert attribute_answer(varied, shown) == before


def test_attribution_from_many_threads_equals_one_thread():
    """Handlers attribute from several threads (LangChain batch, the study's --concurrency):
    more contexts than the kept decisions hold (64), so threads evict each other's; every
    answer is attributed as one thread attributes it."""
    from concurrent.futures import ThreadPoolExecutor

    def job(i: int) -> list[tuple[int, tuple[int, ...]]]:
        context = [
            ContextDocument(f"Ada Lovelace {i}", group="female"),
            ContextDocument(f"Alan Turing {i}", group="male"),
        ]
        answer = f"- Ada Lovelace {i}: a pioneer [1]\n- Alan Turing {i} (DocTitle: Alan Turing {i})"
        result = attribute_answer(answer, context)
        return [(b.line_number, tuple(a.position for a in b.attributions)) for b in result.bullets]

    alone = [job(i) for i in range(300)]
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(job, range(300)))
    assert together == alone
    assert alone[0] == [(1, (0,)), (2, (1,))]


@pytest.mark.parametrize(
    "title",
    [
        "Fujiwara no Michinaga",
        "Simon bar Kokhba",
        "Áed mac Cináeda",
        "Thomas à Kempis",
        "Ngũgĩ wa Thiong'o",
    ],
)
def test_a_name_with_a_lower_case_particle_is_no_topic_title(title):
    # review of issue 33: a title holding a particle that only the attribution's own list knew
    # was read as a topic ('X no Y'), so its text's stated name attributed alone: steering
    steered = ContextDocument(
        title, group="male", text=f"Title: {title}\n{title}, known as Ada Lovelace, was a poet."
    )
    assert "Ada Lovelace" in document_aliases(steered)  # the document's claim...
    assert not attribute_answer("- Ada Lovelace", [steered]).attributions  # ...never alone


def test_a_pronoun_after_an_opening_that_names_someone_else_gives_no_alias():
    # review of issue 33: 'She was known ... as' after a sentence naming his wife is hers
    smith = ContextDocument(
        "John Smith",
        group="male",
        text="Title: John Smith\nJohn Smith was an actor; he married the actress Jane Doe. She "
        "was known to audiences as Lady Jane Grey.",
    )
    assert document_aliases(smith) == ("John Smith",)
    cited = attribute_answer("- Lady Jane Grey (DocTitle: John Smith)", [smith])
    assert [a.names_person for a in cited.attributions] == [False]  # True before the fix


@pytest.mark.parametrize(
    "answer",
    [
        "- Marie Curie (DocTitle: Marie Curie)\n- Alan Turing (DocTitle: Alan Turing)",
        "- Marie Curie [1]\n- Alan Turing [3]",
        "- Marie Curie [2]\n- Alan Turing [3]",
        "- Marie Curie [1][2]\n- Alan Turing [3]",
        "- Marie Curie won two prizes\n- Alan Turing broke codes",
    ],
)
def test_two_chunks_of_one_document_are_attributed_once_per_bullet(answer):
    """Two shown chunks of one document (the same title): a bullet citing or naming it was
    attributed to both, so attributed parity was 0.667 where the paper's parity, whose titles
    resolve to the first entry, is 0.5."""
    context = [
        ContextDocument("Marie Curie", group="female", text="Marie Curie was a physicist."),
        ContextDocument("Marie Curie", group="female", text="She won two Nobel prizes."),
        ContextDocument("Alan Turing", group="male"),
    ]
    attributed = attribute_answer(answer, context)
    assert [(a.title, a.group) for a in attributed.attributions] == [
        ("Marie Curie", "female"),
        ("Alan Turing", "male"),
    ]
    assert attributed_generation_parity(attributed, "female") == 0.5
    assert attributed_groundedness(attributed) == 1.0
    assert all(b.overcited == 0 and not b.miscited for b in attributed.bullets)


def test_a_name_line_under_an_item_citing_the_second_chunk_is_its_description():
    context = [
        ContextDocument("Marie Curie", group="female", text="Marie Curie was a physicist."),
        ContextDocument("Marie Curie", group="female", text="She won two Nobel prizes."),
        ContextDocument("Alan Turing", group="male"),
    ]
    for cited in ("[1]", "[2]"):
        attributed = attribute_answer(
            f"- Nobel laureate {cited}\nMarie Curie\n- Alan Turing [3]", context
        )
        assert len(attributed.bullets) == 2, cited
        assert attributed_generation_parity(attributed, "female") == 0.5


def test_two_people_who_share_a_title_in_different_groups_stay_two_documents():
    context = [
        ContextDocument("Alex Morgan", group="female", text="Alex Morgan is a soccer player."),
        ContextDocument("Alex Morgan", group="male", text="Alex Morgan is a chemist."),
    ]
    attributed = attribute_answer(
        "- Alex Morgan, soccer player [1], and Alex Morgan, chemist [2]", context
    )
    assert sorted(a.position for a in attributed.attributions) == [0, 1]


def test_an_entry_number_two_searches_share_cites_the_entry_the_line_names():
    """An agent's two searches, each numbered from ``[1]``: ``[1]`` names two documents. A line
    that names one of them cites it (explicitly); a line naming no shown person, or both,
    cites no one (it stays unresolved, as written); a line naming another shown person cites it
    wrongly whichever search's entry it means: a mis-citation (a user trial: it stayed
    unresolved, so two searches hid the mis-citation one search counts); a range reads each
    number so. Before, ``[1]`` was the first search's first document: ``- Ada Lovelace [1]``
    counted a mis-citation of Alan Turing."""
    context = [
        ContextDocument("Alan Turing", group="male", number=1),
        ContextDocument("Edsger Dijkstra", group="male", number=2),
        ContextDocument("Ada Lovelace", group="female", number=1),
        ContextDocument("Grace Hopper", group="female", number=2),
        ContextDocument("Barbara Liskov", group="female", number=3),
    ]
    answer = attribute_answer(
        "- Ada Lovelace [1]\n- Alan Turing [1]\n- A pioneer of computing [1]\n"
        "- Ada Lovelace and Alan Turing [1]\n- Grace Hopper [1-2]\n- Barbara Liskov [3]",
        context,
    )
    cited = [
        (
            [(a.title, a.style) for a in b.attributions],
            b.unresolved,
            [a.title for a in b.miscited],
        )
        for b in answer.bullets
    ]
    assert cited == [
        ([("Ada Lovelace", "numbered")], (), []),
        ([("Alan Turing", "numbered")], (), []),
        ([], ("1",), []),
        ([("Ada Lovelace", "implicit"), ("Alan Turing", "implicit")], ("1",), []),
        ([("Grace Hopper", "numbered")], (), ["Alan Turing"]),  # [1]: Turing's or Ada's
        ([("Barbara Liskov", "numbered")], (), []),
    ]
    (wrong,) = attribute_answer("- Barbara Liskov [1]", context).bullets
    assert [a.title for a in wrong.miscited] == ["Alan Turing"] and not wrong.unresolved
    assert [(a.title, a.style) for a in wrong.attributions] == [("Barbara Liskov", "implicit")]
    # the rest of the line naming a carrier, or its surname, cites it, as one search reads it
    # (a review: each was charged to Alan Turing, the first search's [1])
    for line in (
        "- Grace Hopper, who admired Ada Lovelace [1]",
        "- Grace Hopper's predecessor, Lovelace [1]",
        "- The Countess of Lovelace and Grace Hopper's mentor [1]",
    ):
        (bullet,) = attribute_answer(line, context).bullets
        assert ("Ada Lovelace", "numbered") in [(a.title, a.style) for a in bullet.attributions]
        assert not bullet.miscited and not bullet.unresolved, line
        (alone,) = attribute_answer(line, [context[2], context[3]]).bullets  # one search
        assert [a.title for a in alone.attributions] == [a.title for a in bullet.attributions]
    # a surname alone names which search's entry it cites (a user trial: no one credited)
    (surname,) = attribute_answer("- Lovelace [1]", context).bullets
    assert [(a.title, a.style) for a in surname.attributions] == [("Ada Lovelace", "numbered")]
    # each [1] right after its own person's name cites that person's entry (a user trial:
    # both unresolved, as the line names two carriers); one [1] after both names: no one
    for line in (
        "- Alan Turing [1] and Ada Lovelace [1] pioneered computing",
        "Alan Turing co-founded it [1], while Ada Lovelace wrote notes [1].",
    ):
        (both,) = attribute_answer(line, context).bullets
        cited = sorted((a.title, a.style) for a in both.attributions)
        assert cited == [("Ada Lovelace", "numbered"), ("Alan Turing", "numbered")], line
        assert not both.unresolved and not both.miscited
    (one,) = attribute_answer("- Alan Turing and Ada Lovelace [1]", context).bullets
    assert one.unresolved == ("1",) and {a.style for a in one.attributions} == {"implicit"}
    # a second name, not a carrier, before its own [1]: that [1] is wrong, a mis-citation (a
    # user trial: read as the head's, Grace Hopper's, so none was counted)
    (second,) = attribute_answer("- Ada Lovelace [1] and Barbara Liskov [1]", context).bullets
    assert [a.title for a in second.miscited] == ["Alan Turing"]
    assert ("Ada Lovelace", "numbered") in [(a.title, a.style) for a in second.attributions]
    # another shown person's surname alone with a shared number: a mis-citation, as with one
    # search (a user trial: nothing counted)
    (other,) = attribute_answer("- Hopper [1]", context).bullets
    assert [a.title for a in other.miscited] == ["Alan Turing"] and not other.attributions
    # chunks of one document labelled alike are one document: their number is not shared
    chunks = [ContextDocument("Ada Lovelace", group="female", number=1)] * 2
    (bullet,) = attribute_answer("- Her notes [1]", chunks).bullets
    assert [a.title for a in bullet.attributions] == ["Ada Lovelace"] and not bullet.unresolved


def test_a_document_shown_under_two_numbers_is_cited_by_either():
    """A document a second search showed again is one entry carrying both labels
    (``also_numbered``): its second label cites it, and is shared with the second search's
    entry of that number, so a line naming neither cites no one by it. Before (one label
    kept), ``- Ada Lovelace [3]`` counted a mis-citation of Barbara Liskov."""
    context = [
        ContextDocument("Alan Turing", group="male", number=1),
        ContextDocument("Edsger Dijkstra", group="male", number=2),
        ContextDocument("Barbara Liskov", group="female", number=3),
        ContextDocument("Ada Lovelace", group="female", number=4, also_numbered=(3,)),
    ]
    answer = attribute_answer(
        "- Ada Lovelace [3]\n- Barbara Liskov [3]\n- Ada Lovelace [4]\n- A pioneer [3]", context
    )
    cited = [([a.title for a in b.attributions], b.unresolved, b.miscited) for b in answer.bullets]
    assert cited == [
        (["Ada Lovelace"], (), ()),
        (["Barbara Liskov"], (), ()),
        (["Ada Lovelace"], (), ()),
        ([], ("3",), ()),
    ]


def test_a_shared_number_reads_the_same_whichever_context_was_seen_first():
    """A review: the decisions kept across answers were keyed without the groups, while which
    entries are one document (so which numbers are shared) depends on them: ``[1]`` on two
    Alex Morgans read as the first context seen had it."""
    two = [ContextDocument("Alex Morgan", group=g, number=1) for g in ("female", "male")]
    one = [ContextDocument("Alex Morgan", group="female", number=1)] * 2
    line = "- A forward of renown [1]"
    for first, second in ((two, one), (one, two)):
        attribution._SHARED.clear()
        results = {}
        for context in (first, second):
            (bullet,) = attribute_answer(line, context).bullets
            results[context[1].group] = ([a.title for a in bullet.attributions], bullet.unresolved)
        assert results == {"male": ([], ("1",)), "female": (["Alex Morgan"], ())}


def test_a_line_opening_with_its_citation_writes_each_before_its_sentence():
    """A user trial: in ``[1] Alan Turing broke Enigma. [2] Ada Lovelace wrote notes.`` the
    ``[2]`` was read as the first sentence's, a mis-citation, and parity 0.0 where a reader
    counts two correct citations. A line opening with a citation writes each citation before
    its sentence; a line that does not keeps them after their full stops."""
    context = [
        ContextDocument("Alan Turing", group="male"),
        ContextDocument("Ada Lovelace", group="female"),
    ]
    for line in (
        "[1] Alan Turing broke Enigma. [2] Ada Lovelace wrote notes.",
        "Alan Turing broke Enigma. [1] Ada Lovelace wrote notes. [2]",
    ):
        result = attribute_answer(line, context)
        cited = sorted((a.title, a.style) for a in result.attributions)
        assert cited == [("Ada Lovelace", "numbered"), ("Alan Turing", "numbered")], line
        assert result.miscitations == [], line


def test_a_number_two_searches_share_in_a_sources_line_or_footnote_cites_each_bullets_carrier():
    """A user trial: ``Sources: [1], [2]`` or a footnote ``[^1]: 1`` after two searches (each
    numbered from ``[1]``) credited no one: each bullet is now cited by the carrier it names,
    as ``[1]`` written on the line reads; a bullet naming another shown person is mis-cited."""
    context = [
        ContextDocument("Alan Turing", group="male", number=1),
        ContextDocument("Ada Lovelace", group="female", number=2),
        ContextDocument("Grace Hopper", group="female", number=1),
        ContextDocument("Barbara Liskov", group="female", number=2),
    ]

    def read(answer: str) -> list[tuple[list[tuple[str, str]], list[str]]]:
        bullets = attribute_answer(answer, context).bullets
        return [
            ([(a.title, a.style) for a in b.attributions], [a.title for a in b.miscited])
            for b in bullets
        ]

    assert read("- Grace Hopper\n- Barbara Liskov\n\nSources: [1], [2]") == [
        ([("Grace Hopper", "source_label")], []),
        ([("Barbara Liskov", "source_label")], []),
    ]
    assert read("- Grace Hopper[^1]\n- Alan Turing[^1]\n\n[^1]: 1") == [
        ([("Grace Hopper", "numbered")], []),
        ([("Alan Turing", "numbered")], []),
    ]
    assert read("- Barbara Liskov[^1]\n\n[^1]: 1") == [
        ([("Barbara Liskov", "implicit")], ["Alan Turing"])
    ]
