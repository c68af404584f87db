"""The attribution rule against hand labels on a real model's answers (docs/SPEC.md,
"Attribution").

``fixtures/smollm2_answers.json`` holds the 135 distinct answers of SmolLM2-135M-Instruct
(``--llm local``, greedy, 160 tokens) to the study's prompts in its first 40 trials (balanced
corpus, the paper's four rankers, seed 2026: ``fairrag study --llm local --rankers paper
--trials 40``; rankers showing the same list to the same question share one answer), each with
the five documents it was shown (title, text as shown, group). Each bullet was labelled by
reading it, never by running the rule: the shown entries (1-based ``[n]``) the bullet is about
or cites, or none (a person not shown, a blend of two shown names, a film, a date). Answers
43-134 were labelled by four readers under one written guide (the person a bullet's head names,
by title, by a name the entry's own text gives, or an obvious form of it; a title in brackets
cites that entry too); two of their calls were revised on re-reading, as their comments say.
The rule must agree with the labels on at least 95% of the bullets it attributes and miss at
most 5% as many labelled bullets.
"""

from __future__ import annotations

import json
from pathlib import Path

from fairrag_core.attribution import attribute_answer
from fairrag_core.citations import ContextDocument

FIXTURE = Path(__file__).parent / "fixtures" / "smollm2_answers.json"

LABELS: dict[int, str] = {
    # answer index: "line:entries" for every bullet about or citing a shown entry (others: none)
    0: "5:5 6:4 7:5",  # 1-4: Harry Potter, The Twilight Zone, ... (not people shown)
    1: "1:1 2:2 3:3 4:4 5:5",
    2: "1:1 2:2 3:3 4:4 5:5",  # "- [1]": entry numbers only
    3: "1:1 2:2 3:3 4:4 5:5",
    4: "1:1 2:2 4:3 5:4",  # 3: "Max Levitt", not shown
    5: "1:4 2:5",
    6: "1:4 2:5 4:5",  # 3: "Max Levitan", not shown
    7: "1:1 2:2 3:3 4:4",
    8: "1-10:1",  # the loop the token cap stops
    9: "1:1 2:2 3:4 4:4 5:5",
    10: "2:4 3:5 4:5",  # 1 and 5: "Harry Winston", not shown
    11: "1:1 2:2 3:3 4:4 5:5",
    12: "1:1 2:2 3:3 4:4 5:5",
    13: "1:1 2:2 3:3 4:4 5:5",
    14: "1:1 2:2 3:3",
    15: "1:1 2:2 3:3 4:4",
    16: "1:1 2:2 3:3 4:3 5:4",  # 4: "John the Forerunner", the name entry 3's text gives him
    17: "1:1 2:2 3:3 4:4 5:5",  # 5: "Patrick John O'Brien", entry 5's full name
    18: "2:3 3:4 4:5",
    19: "1:5",  # line 2 is prose describing him, not a bullet
    20: "1:1 2:2 3:3",  # 4: "Lucy Herzog", a blend of entries 4 and 5, nobody shown
    21: "1:4 2:5",
    22: "1:5",  # 2-16: "Harry Potter (2016)", the loop the token cap stops
    23: "",  # no bullet: the model repeats the prompt's role line
    24: "1:1 2:2 3:3 4:5 5:4",
    25: "1:1 2:2 3:3",
    26: "1:1 2:2 3:3 4:4",
    27: "1:1 2:2 3:3 4:4",
    28: "1:1 2:2 3:3 4:4",
    29: "1-23:1",  # a loop on entry 1 until the token cap
    30: "1-10:1",
    31: "1-23:1",
    32: "1:1 2-23:2",
    33: "1:1 2:2 3:3 4:4 5:5",
    34: "1:1 2:2 3:4 4:3 5:5",  # titles repeated in brackets
    35: "1-23:1",
    36: "1:1 2:2 3:3 4:4",
    37: "1:1 2:2 3:3 4:4 5:5",
    38: "1:1 2:2 3:4 5:5 6:1 7:2 8:4 9:4 10:1 11:2 12:4 13:4 14:1 15:2 16:4 17:4 18:1 19:2 "
    "20:4 21:4 22:1 23:2",  # 4: "Yoshida Shōnan", a blend; 23: "Kuniaki Kois", cut by the cap
    39: "1:1 2:2 3:3 4:4 5:5",
    40: "1:1 2:2 3:3 4:5",
    41: "1:1 2:2 3:3 4:4",
    42: "1:1 2:2 3:3",
    # 43: 2 and 5: sub-list items naming Mercer/Cameron (Cameron's description and dates are
    # copied from other entries; the head decides); 7: Joshua Fishman, cut mid-line but the name
    # is complete
    43: "1:1 2:1 4:2 5:2 7:5",
    # 44: the qualifiers in brackets ('(linguist)', '(politician)') are not entry titles and do
    # not matter; 2-3: Sarah Jane Mercer repeated
    44: "1:1 2:2 3:2 4:4 5:5",
    # 45: 4: Maximilian Karl Emil Weber, the full name entry 2's text gives; the garbled dates do
    # not matter
    45: "1:1 2:2 3:2 4:2 5:4",
    # 46: 1: the head is Sarah Mercer; the bracket copies Fishman's Yiddish name and dates
    # (description text, not a title citation), so only entry 2
    46: "1:2 2:5",
    # 47: each line is 'Head (Title)': head Ida Elizabeth Mathis (entry 2) / Robert Marion Clawson
    # (entry 3) plus a shown person's title in parentheses, read as a citation of that entry
    # (Daron Joffe = 1, Ida Elizabeth Mathis = 2); 4-5: Coppess (Coppess) = 5 only
    47: "1:2 2:2 3:3 4:5 5:5",  # issue 33 guide: '- A (B)' is about A, B a mis-citation
    # 48: 'Head (Title)': Ida Elizabeth Mathis (entry 2) citing Daron Joffe (1); Charles Lambert
    # (5) citing Lindiwe Majele Sibanda (4)
    48: "1:2 2:2 3:5 4:5",  # issue 33 guide: '- A (B)' is about A, B a mis-citation
    # 49: 2: Robert Marion Clawson, the full name entry 3's text gives
    49: "1:2 2:3 3:3 4:4 5:5",
    # 50: 3: 'Tom Clawson', a blend of Tom Buis and Marion Clawson, nobody shown; the dates do not
    # matter
    50: "1:2 2:2 4:3 5:3",
    # 51: the '1.'..'4.' after '- ' are list ordinals, not citations of entries 1-4
    51: "1:2 2:3 3:4 4:5",
    # 52: 2: prose describing the line-1 item (Rameau's text copied), not a new item; 4-12: the
    # loop of standalone name lines; 14: 'Mstislav Leopoldovich R', cut by the cap after his given
    # name and patronymic (kept, like the earlier 'Kuniaki Kois' precedent)
    52: "1:5 4:5 6:5 8:5 10:5 12:5 14:5",
    # 53: Jean-Baptiste Lully and François Couperin are only mentioned in Rameau's text; neither
    # is a shown person
    53: "",
    # 54: 3: 'The answer is: Jean-Philippe Rameau' presents the shown person as the answer, so
    # labelled
    54: "1:5 3:5",
    # 55: 2: John Robert Fowles, the full name; 4: Matthew Joseph Bruccoli, the full name; the
    # mixed-up dates do not matter
    55: "1:2 2:2 3:4 4:5",
    # 56: 4: David Simon Blondheim, the full name; the dates are mixed up but the head decides
    56: "1:2 2:3 3:5 4:5",
    # 57: John Arthur Porter, the full name of entry 5; the wrong dates do not matter
    57: "1:5 2:4 3:5",
    # 58: 3: Edward Albert Shils, the full name entry 2's text gives; the wrong dates do not
    # matter
    58: "1:1 2:2 3:2",
    59: "1:1 2:2 3:3 4:4",
    # 60: 4: David Naguib Pellow, the full name
    60: "1:1 2:2 3:3 4:4 5:5",
    61: "1:1 2:2 3:3 4:4",
    # 62: 2: the wrong end date does not matter
    62: "1:1 2:2",
    # 63: 2 and 4: prose describing the item above, not new items; 6: under item 3 (Mattei) but
    # the head names Ellen Dorrit Hoffleit (entry 4, full name) with Mattei's description copied,
    # so the head decides: entry 4; cut after the name
    63: "1:1 3:2 5:3 6:4",
    64: "1:1 2:2 3:3 4:4",
    # 65: 3: 'Eleanor Margaret Burbidge', entry 2's full name; wrong dates ignored
    65: "1:1 2:2 3:2 4-7:4",
    # 66: 2: 'Ellen Dorrit Hoffleit', entry 1's full name
    66: "1:1 2:1 3:3 4:4",
    # 67: 1: head Deborah Cameron, death date copied from Starostin (head decides); 3: 'Sarah Jane
    # Cameron', a blend of Sarah Jane Mercer and Deborah Cameron, nobody shown; 8: cut by the cap
    # after the name is complete
    67: "1:1 2:1 4:2 5-8:5",
    # 68: 3: 'Sarah Jane Mercer', entry 3's full name; '(linguist)' qualifier ignored
    68: "1:1 2:3 3:3 4:5 5:5",
    # 69: 7: repeats the question; 9: 'Answer:' - no label
    69: "1:1 2:2 3:4 4:3 5:4",
    # 70: 1: head Sarah Mercer, parenthesis copied from Fishman's text ('Shikl Fishman' is an
    # alias, not a title citation) - head decides, entry 2 only; 3: cut by the cap after the name
    70: "1:2 2:5 3:5",
    # 71: hard call: head 'Ida Elizabeth Mathis' (entry 2, middle name dropped) plus a title in
    # parentheses '(Daron Joffe)' = citation of entry 1, so both; 3: head 'Robert Marion Clawson'
    # (entry 4's full name) plus '(Lindiwe Sibanda)', an obvious form of entry 5's title, so both
    # [lead's correction on re-reading: line 3's bracket names Lindiwe Sibanda, entry 3 (the
    # labeller had 5); Marion Clawson is entry 4]
    71: "1:2 2:2 3:4 4:5 5:5",  # issue 33 guide: '- A (B)' is about A, B a mis-citation
    # 72: 2: 'Ida Elizabeth Mathis', obvious form of entry 2; wrong dates ignored
    72: "1:1 2:2 3:3 4:5",
    # 73: loop on 'Ida Elizabeth Mathis' (entry 2); 13: 'Ida Elizabeth' cut by the cap before the
    # surname, name not complete - left out
    73: "1-12:2",
    # 74: 2-3: unbulleted lines presenting 'Maximilian Raoul Steiner' (entry 1's full name) as
    # items; hard call 5: 'Mstislav Leopoldovich' (first name + patronymic of entry 2's full name,
    # not cut) labelled 2; 17: 'Mstislav' cut by the cap before the name is complete - left out
    74: "1-3:1 4-16:2",
    # 75: 2: Jean-Baptiste Lully and 3: Francois Couperin are named in Rameau's text but not shown
    # entries
    75: "1:5",
    # 76: 2: 'John Coolidge Adams', entry 2's full name; 4-5: 'Karl August Leopold Bohm', entry
    # 4's full name; '(composer)' ignored
    76: "1:2 2:2 3:3 4:4 5:4",
    # 77: 1: head Aileen Christianson with dates from Shils - head decides; 2: title without
    # '(naturalist)'
    77: "1:4 2:3 3:5",
    # 78: wrong years in brackets ignored
    78: "1:1 2:2 3:3",
    # 79: 1: 'John Porter' = title without '(sociologist)', wrong dates ignored; 2: 'James
    # Harrison', entry 4's full name; 4: 'John Arthur Porter', entry 3's full name
    79: "1:3 2:4 3:1 4:3",
    # 80: 3: 'Edward Albert Shils', entry 3's full name
    80: "1:1 2:3 3:3",
    # 81: 4: 'Harry Black' = title without '(city manager)'
    81: "1:1 2:2 3:3 4:4 5:5",
    # 82: 4: 'David Naguib Pellow', entry 5's full name
    82: "1:1 2:2 3:3 4:5 5:4",
    83: "1:1 2:2 3:3 4:4",
    # 84: 3: 'Charles Wright Mills', entry 2's full name; 6: 'David W. Wardini', a blend of David
    # W. Harvey and Soham El Wardini, nobody shown - left out
    84: "1:1 2-4:2 5:3",
    # 85: 1-2: head plus the entry's own full name repeated; hard call 3: head Friedrich Karl
    # Arnold Schwassmann, followed by 'Williamina Fleming (15 May 1857 - 21 May 1911' copied from
    # entry 5 without brackets/citation - head decides, entry 3 only
    85: "1:1 2:2 3:3",
    86: "1:1 2:2 3:3",
    # 87: 3: Eleanor Margaret Burbidge, entry 2's full name; 5,6: 'Petrus Adolphe Jacques
    # Quetelet', a blend of Petrus Apianus (5) and Adolphe Quetelet (4) (first name and dates from
    # Apianus), nobody shown; 8: 'Petrube Adolphe Jacques Quetelet', same blend, garbled; dates
    # ignored
    87: "1:1 2:2 3:2 4:3 7:4",
    # 88: 3: Ellen Dorrit Hoffleit, entry 2's full name; wrong dates ignored
    88: "1:1 2:2 3:2",
    # 89: 2,6,10,14,18: ', commonly named Yoshida Shōin' continues the previous item (starts with
    # a comma), not a new item; 3,7,11,15: prose, no name; blank lines 4,8,12,16
    89: "1:1 5:1 9:1 13:1 17:1",
    # 90: '(geographer)' added to Kuhle and Katz does not matter
    90: "1:1 2:2 3:3 4:4",
    # 91: '(geographer)' qualifiers ignored
    91: "1:1 2:2 3:3 4:4",
    92: "1:1 2:2",
    # 93: 2: Sir Thomas Elyot; 4: Maximilian Karl Emil Weber, entry 2's full name; 5: 'François
    # Ozanne-Rivierre', a one-letter misspelling of Françoise Ozanne-Rivierre (same distinctive
    # surname), counted as entry 4 (hard call)
    93: "1:1 2:1 3:2 4:2 5:4",
    94: "1:4",
    # 95: 1: David Diamond, named in Tureck's text but not shown; 2: Julia Myra Hess, entry 5's
    # full name (Dame Julia Myra Hess); 3-5: Martin Luther King Jr., not shown
    95: "2:5",
    # 96: 3: Max Steiner (Maximilian Raoul Steiner), both names of entry 3
    96: "1:1 2:2 3:3",
    # 97: 1: Jean-Baptiste Lully and 2-10: François Couperin, named in Rameau's text but not shown
    97: "",
    # 98: bracketed qualifiers ('cellist', 'composer') ignored
    98: "1:1 2:2 3:3 4:4 5:5",
    # 99: 3: John Robert Fowles with Biegel's dates: head decides, entry 2; 4: Paulus Johannes
    # 'Paul' Biegel, entry 3's full name
    99: "1:1 2:2 3:2 4:3 5:5",
    # 100: 3: James Harrison, entry 2's full name; 5: Halldór Kiljan Laxness, entry 4's full name;
    # wrong dates ignored
    100: "1:1 2:2 3:2 4:4 5:4",
    101: "1:5",
    # 102: 1: David W. Harvey, entry 1's text name
    102: "1:1 2:2 3:4 4:3",
    # 103: 1: John Arthur Porter, entry 1's full name; wrong dates ignored
    103: "1:1 2:2 3:3",
    104: "1:1 2:2 3:3",
    # 105: 2,11: 'Yoshitake Shōnen', not shown (not Yokoi Shōnan); 7: repeats the question;
    # 9,16,19: headers; 17: one list item naming Yoshida Shōin, Fukuda Hideko and Yokoi Shōnan,
    # gets all three (hard call); 20: 'Yoshitake Shōnen' with Fujimoto's description, head not
    # shown; 21: '2', cut
    105: "1:1 3:3 4:3 5:4 10:1 12:3 13:3 14:4 17:1,3,4",
    # 106: 4: Masayuki Mori, named in Arishima's text but not shown; 6: Yokoi Tokiari, entry 5's
    # real name per its text; 7-23: 'Yokoi Toki', the loop on a truncated Yokoi Tokiari (same
    # surname, only Yokoi shown), counted as entry 5 (hard call) [lead's call on this flagged hard
    # call, by LABELLING.md: 'Yokoi Toki' is not an obvious form of Yokoi Tokiari (a different
    # given name, not an initial or short form), so lines 7-23 name nobody shown and are left out]
    106: "1:1 2:2 3:2 5:4 6:5",
    # 107: a loop on entry 1 until the token cap
    107: "1-23:1",
    # 108: 4: 'Yoshida Shōnan', a blend of Yoshida Shōin (3) and Yokoi Shōnan (5), nobody shown;
    # 23: 'Yoshida Shō', cut by the cap, counted as entry 3 (hard call, like 'Kuniaki Kois' in the
    # earlier labels)
    108: "1:1 2:2 3:3 5:5 6:1 7:2 8-10:3 11:1 12:2 13-15:3 16:1 17:2 18-20:3 21:1 22:2 23:3",
    # 109: '(geographer)' qualifiers ignored
    109: "1:1 2:2 3:3 4:4",
    # 110: '(AJC)' is meaningless, ignored; 3: Cindi Katz is entry 4
    110: "1:1 2:2 3:4",
    # 111: 2-3: the '(geographer)' qualifiers are not shown titles (only entry 1's title has it)
    # and do not matter
    111: "1:1 2:2 3:3",
    # 112: 1: 'John Arthur Porter', entry 5's full name; 3: 'David Sadler (geologist)', head David
    # Sadler = entry 2, the wrong qualifier does not matter
    112: "1:5 2:4 3:2 4:3",
    # 113: 2, 5, 8: sub-list items that name the person (as in answer 43); 1-2: Cameron's death
    # date copied from Starostin, head decides; 8: head L. L. Zamenhof with Hashimoto's
    # description, cut by the cap after the name is complete; 3, 6: blank
    113: "1:1 2:1 4:2 5:2 7:5 8:5",
    # 114: 2: 'Sir Thomas Elyot', the entry's own name; the ordinals 1.-5. are not citations (5.
    # Charlize Theron is entry 4)
    114: "1:1 2:1 3:2 4:3 5:4",
    # 115: loop on 'Sarah Jane Mercer', entry 2's full name; hard call 14: 'Sarah Jane Merc' cut
    # by the cap partway through the surname, kept like the 'Kuniaki Kois' / 'Mstislav
    # Leopoldovich R' precedents (unlike 'Ida Elizabeth', where the surname had not started)
    115: "1-14:2",
    # 116: 1-2: 'Ida Elizabeth Mathis', entry 2 without 'Brandon'; wrong dates ignored
    116: "1:2 2:2 3:4 4:5",
    # 117: 1-2: 'Head (Title)': Ida Elizabeth Mathis (entry 2) plus '(Daron Joffe)', entry 1's
    # title, so both (as in answers 47/71); 5: 'May Roberta Berenbaum', entry 5's full name
    117: "1:2 2:2 3:3 4:5 5:5",  # issue 33 guide: '- A (B)' is about A, B a mis-citation
    # 118: loop on 'Ida Elizabeth Mathis' (entry 2); 9: cut by the cap in the dates, after the
    # name is complete; wrong dates ignored
    118: "1-9:2",
    # 119: wrong dates ignored (Buis given Milkman's birth year)
    119: "1:2 2:3 3:4",
    # 120: Clara Schumann = entry 4, Rosalyn Tureck = entry 5; wrong dates ignored
    120: "1:4 2:5 3:4 4:5",
    # 121: Rostropovich = entry 4, Julian Lloyd Webber = entry 3; wrong dates ignored
    121: "1:4 2:3",
    # 122: Jean-Baptiste Lully, Francois Couperin and Johann Sebastian Bach are only mentioned in
    # the texts of Rameau/Tureck; none is a shown person; 10: cut, Couperin anyway
    122: "",
    # 123: hard call: head Sharon Isbin (entry 2) plus '(Dame Julia Myra Hess)', a bracket holding
    # only a name, entry 4's full name containing her title 'Myra Hess', read as 'Name A (Title
    # B)', so both (unlike answers 46/70, whose bracket was copied description text: Yiddish alias
    # + dates)
    123: "1:2",  # issue 33 guide: '- A (B)' is about A, B a mis-citation
    # 124: 2: head David S. Blondheim with Kristel's dates, head decides; 3: 'David Simon
    # Kristel', a blend of David Simon Blondheim (entry 3) and Sylvia Kristel (entry 4), nobody
    # shown - left out
    124: "1:2 2:3",
    # 125: ordinals are not citations (4. Julia Kristeva is entry 4, 5. Ruth Crocker is entry 5 by
    # name)
    125: "1:1 2:2 3:2 4:4 5:5",
    # 126: 'Dr. John Smith' is not a shown person
    126: "",
    # 127: 1, 5: 'David W. Harvey', entry 1's full name; 4: Isabelle Thomas = entry 5 (title
    # without '(geographer)')
    127: "1:1 2:2 3:2 4:5 5:1",
    128: "1:1 2:2 3:3 4:4 5:5",
    # 129: Hildegard Binder Johnson = entry 5, Mary Gabriel = entry 4 (title without '(author)')
    129: "1:5 2:4",
    # 130: 1: 'John Porter', title without '(sociologist)'; wrong end date on 2 ignored
    130: "1:1 2:2",
    # 131: 3: 'Ellen Dorrit Hoffleit', entry 2's full name; the years in brackets do not matter
    131: "1:1 2:2 3:2 4:4 5:5",
    132: "1:1 2:2 3:3 4:4 5:5",
    # 133: 4: head Adolphe Quetelet with Leavitt's dates, head decides (entry 3); wrong dates
    # elsewhere ignored
    133: "1:1 2:2 3:3 4:3 5:4 6:5",
    # 134: 2: 'Ellen Dorrit Hoffleit', entry 1's full name; hard call 3: 'Frederic Karl Arnold
    # Schwassmann', the anglicised form of Friedrich with the middle names and surname exact, read
    # as an obvious form of entry 2 (not a different person like 'Max Levitt')
    134: "1:1 2:1 3:2 4:3 5:4",
}


def _labels(text: str) -> dict[int, set[int]]:
    out: dict[int, set[int]] = {}
    for item in text.split():  # "3:2" line 3 is about entry 2; "1-23:1" lines 1 to 23
        lines, entries = item.split(":")
        first, _, last = lines.partition("-")
        for line in range(int(first), int(last or first) + 1):
            out[line] = {int(e) for e in entries.split(",")}
    return out


def _answers() -> list[dict]:
    return json.loads(FIXTURE.read_text(encoding="utf-8"))


def test_the_fixture_is_the_real_models_answers_to_the_studys_prompts():
    answers = _answers()
    assert len(answers) >= len(LABELS)
    for item in answers:
        assert len(item["context"]) == 5
        assert all(c["group"] in ("female", "male") for c in item["context"])
        assert all(c["text"].startswith("Title: " + c["title"]) for c in item["context"])


def agreement(
    answers: list[dict], labels_of: dict[int, str]
) -> tuple[int, int, int, int, list[tuple]]:
    """``(attributed, agreed, missed, labelled, disagreements)``: bullets the rule attributes,
    those whose entries equal the label, labelled bullets it attributes to nothing, labelled
    bullets, and each disagreement as ``(answer, line, rule's entries, label)``."""
    attributed = agreed = missed = labelled = 0
    disagreements = []
    for index, text in labels_of.items():
        item = answers[index]
        context = [
            ContextDocument(c["title"], group=c["group"], text=c["text"]) for c in item["context"]
        ]
        labels = _labels(text)
        labelled += len(labels)
        result = attribute_answer(item["answer"], context)
        found = {b.line_number: {a.position + 1 for a in b.attributions} for b in result.bullets}
        for line, entries in found.items():
            if entries:
                attributed += 1
                agreed += labels.get(line) == entries
                if labels.get(line) != entries:
                    disagreements.append((index, line, entries, labels.get(line)))
        missed += sum(1 for line in labels if not found.get(line))
    return attributed, agreed, missed, labelled, disagreements


def group_labels(answers: list[dict], labels_of: dict[int, str], group: str) -> dict[int, str]:
    """``labels_of`` with only the items about ``group``'s entries (per group figures)."""
    return {
        index: " ".join(
            item
            for item in text.split()
            if all(
                answers[index]["context"][int(e) - 1]["group"] == group
                for e in item.split(":")[1].split(",")
            )
        )
        for index, text in labels_of.items()
    }


def test_attribution_agrees_with_the_hand_labels_on_95_percent_of_attributed_bullets():
    attributed, agreed, missed, _, disagreements = agreement(_answers(), LABELS)
    assert len(LABELS) >= 100 and attributed >= 600  # issue 22: at least 100 labelled answers
    assert agreed / attributed >= 0.95, disagreements
    assert missed <= 0.05 * attributed, missed


# -- held-out answers, labelled under a written reader's guide (issue 33, item 6) --------------

FIXTURE_SEED46 = Path(__file__).parent / "fixtures" / "smollm2_seed46_answers.json"
"""The 48 distinct answers of SmolLM2-135M-Instruct to ``fairrag study --llm local --rankers
representative_stochastic --trials 48 --seed 46`` (11 of its 12 topics outside seed 2026's),
each with the five documents shown (title, group, the text as the study shows it)."""

GUIDE = """How a reader labels a line (issue 33; a reader's conventions, not the rule's):
G1. An item is a marked line (``-``, ``1.``) or an unmarked line that is only a name; an
    unmarked line under an item that repeats its name (with dates) or describes it belongs to
    that item, and a line copied from the prompt or a line such as ``The answer is:`` is none.
G2. An item is about the shown entry whose person the name at its head names: by its title,
    by a name the entry's own text gives (full name, birth name, known-as), or an obvious form
    of either (initials, dropped middle names, a title such as Dr., King or Madam, a short
    form, a one-letter slip in a distinctive name: ``Corrine`` for ``Corrinne``). Another given
    name with the same surname (``Charles Creighton`` for James Creighton) is another person;
    a blend of two names is nobody.
G3. ``- A (B)`` is about A, the person the line presents; B in brackets, another shown person,
    is a mis-citation, not an attribution. A qualifier or A's own full name in brackets does not
    matter.
G4. Wrong dates are ignored. A line cut by the token cap counts once its name's surname has
    started (``King Chul``, like ``Sarah Jane Merc`` above); before it, not.
G5. A refusal or a denial is about no one; so is a copied prompt."""

LABELS_SEED46: dict[int, str] = {
    0: "1:1 2:2 3:3 4:4",  # 3: 'John Arthur Porter', entry 3's full name
    1: "1:1 2:2 3:3",  # 3: 'David Bloor (Sylvia Maria Kristel)': about David Bloor (G3)
    2: "1:1 2:2 3:3 4:4",  # wrong dates ignored (G4)
    3: "1:1 2:2 3:3 4:5",  # 4: 'Madam C.J. Walker' is entry 5
    4: "1:1 2:2 3:4 4:3 5:5",  # 5: entry 5's full name
    5: "1:1 2:2 3:3 4:4 5:5",
    6: "1:1 2:2 3:2",  # 3: 'Eleanor Margaret Burbidge', entry 2's full name
    7: "1:1 2:2 3:2 4:3 5:4 6:5",
    8: "1:5",  # 2-5: 'The first female marine engineer in the UK' names no one
    9: "1:2 2:3 3:5",
    10: "",  # the prompt copied (role line, context entries): no item (G5)
    11: "1:1 2-15:2",  # 2-15: 'Sanggung (Kingdom of Korea)', entry 2's title; 15 cut after it
    12: "1:1 3:2 4:4 5:5",  # 1: 'Charles Fry', C. B. Fry's given name; 2: John Arlott, not shown
    13: "1-7:1",  # 7: cut after the complete name
    14: "1:1 2:1 4:3 5:3",  # 3: 'Charles Creighton', another given name (G2); 4-5: Jim Creighton
    # 15: 3: 'Charles Arlott Fry', a blend with John Arlott, nobody shown; 4: 'Charles Edward
    # Trescothick', another given name; 7: 'Helen' cut before the surname
    15: "1:1 2:1 5:2 6:5",
    16: "2:3 3:4",  # 1: John Carmack, not shown; 2: Dennis Fong (entry 3's text); 3: 'Corrine' (G2)
    17: "1:1 2:2 3:3 4:4",
    18: "1:5 2:5",
    19: "1:1 2:2 3:3 4:4 5:5",  # 3: Dennis Fong, entry 3's own name (Thresh)
    20: "",  # Elon Musk, not shown
    21: "1:1 2:2 3:5 4:4 5:5",
    22: "1:1 2:2 3:4",
    23: "1:4",  # '(Microsoft Corporation)' is no person
    24: "1:5 2:4 3:5 4:5 5:5",
    25: "1:1 3:3 4:4 5:5",  # 2: 'Edward S. Thomas', not shown
    26: "1:2 2:2",
    27: "1:3 2:3",
    # 28: lines 2 and 7 (the item's name again, with dates) and 4, 9 describe the item above them
    # (G1); 11: 'Dr. Naomi', cut before the surname [corrected on re-reading the shown list:
    # Naomi Pierce is entry 3, the first pass had 1]
    28: "1:3 6:3",
    29: "1:1 2:2 3:3",
    30: "1:1 2:2 3:3 4:4",
    31: "1:1 2:2 3:3",
    32: "1:5",
    33: "1:1 2:2 3:3 4:4 5:5",
    34: "1:1 2:1 3:1 4:2 5:2 6:4",  # 6: head Elinor Brent-Dyer, '(Ellyn Brent-Dyer)' a misspelling
    35: "1:1 2:2 3:3 4:4",
    36: "1:3 2:2 3:3 4:5 5:5",
    37: "1:5",
    38: "1:5 2:2 3:4 4:4",  # 3-4: 'Maryam bint Imran', entry 4's own name; the brackets: G3
    39: "1:1 2:2 3:3 4:2 5:5 6:4",
    # 40: 2: 'Phra Phuttha Chao Luang', an epithet the shown text does not give; 6: 'King Chul',
    # cut in the name (hard call, kept like 'Sarah Jane Merc' in the first labels)
    40: "1:1 3-6:1",
    41: "1:2 2:1 3:3 4:4 5:5",
    42: "1-6:3",  # 5-6: 'Damong', a one-letter slip (G2); the brackets: G3
    43: "1:1 4:3",  # 3: 'The answer is:' is prose; 4: 'Najibang', a one-letter slip (G2)
    44: "1:2 2:2 3:3 4:4 5:5",
    45: "1:2 2:2 3:3 4:5 5:4",
    46: "1:1 2:2",
    47: "1-3:1",
}


def test_held_out_answers_agree_with_a_readers_labels():
    """On answers from other seeds and topics than the labels above, labelled under GUIDE: the
    rule agrees on 98% of the bullets it attributes (measured: 182 of 183, 99.5%; the one:
    ``Phra Phuttha Chao Luang``, the name entry 1's text says Chulalongkorn was known by, which
    this reader read as an epithet; 180 of 182 before the topic-title and ``He was known ... as``
    alias rules, the two being ``Maryam bint Imran``) and misses at most 2% of the labelled
    bullets (measured: 2 of 184, 1.1%: ``Najibang`` for ``Najibah``, two letters off, and
    ``King Chul`` cut in the name; the one-letter slips ``Corrine`` and ``Damong`` twice are
    read since the ``near`` rule, before which 5 of 184, 2.7%, were missed)."""
    answers = json.loads(FIXTURE_SEED46.read_text(encoding="utf-8"))
    assert len(answers) == len(LABELS_SEED46) == 48 and "G3" in GUIDE
    attributed, agreed, missed, labelled, disagreements = agreement(answers, LABELS_SEED46)
    assert attributed >= 170
    assert agreed / attributed >= 0.98, disagreements
    assert missed <= 0.02 * labelled, missed


# -- answers labelled after the rule stopped changing (issue 33, item 6; 2026-12-06) ------------

FIXTURE_SEED2027 = Path(__file__).parent / "fixtures" / "smollm2_seed2027_answers.json"
"""The first 48 distinct answers of SmolLM2-135M-Instruct to ``fairrag study --llm local
--threads 1 --concurrency 8 --rankers representative_stochastic --trials 192 --seed 2027``
whose topic neither labelled set above holds (12 topics: those of seed 2026's first 40 trials
and seed 46's 48 left out), each with the five documents shown. Labelled blind under GUIDE by a
reader who neither ran the rule nor read its code, after every rule of this release was
written: data the rule was not tuned on."""

LABELS_SEED2027: dict[int, str] = {
    0: "1-2:5",  # 2: 'Sir Clive Marles Sinclair', entry 5's full name; 3-5: David Benson, not shown
    1: "1:2",  # 'Dr. Hal Abelson (Cynthia Solomon)': about Hal Abelson (G3)
    2: "1:1 2:2 3:3",  # wrong dates ignored (G4)
    3: "1:1 2:2 3:3 4:4 5:5",  # brackets are qualifiers (G3)
    4: "1:3 2:2 3:4",  # 2: 'Susan Jean Palmer', entry 2's full name
    5: "1:1 2:2 3:5",
    6: "1:1 2:2",
    7: "1:1 2:2 3:2 4:4",  # '(1)'..'(4)' are numbers, not attributions
    8: "1:5 2:4 3-5:5",  # full names from the entries' text
    9: "1:4 2:3 3:4",
    10: "1:3 2:2",
    11: "1:4 2:3",
    12: "1:5 2:4",
    13: "",  # Dr. John B. Smith, not shown; 2 and 4, 6 describe him
    14: "1:1 2:2 3:3",  # wrong dates ignored (G4)
    15: "1:3 2:4 3:4",  # '(physician)' a qualifier (G3)
    # 16: 3, 6, 9 'The answer is:' is prose; 4, 7, 10 the unmarked name-only line after it is a
    # new item (hard call: 4 and 10 repeat line 1's name, but a prose line separates them)
    16: "1:4 4:4 7:5 10:4",
    17: "1:1 2:2 3:3 4:4 5:5",
    # 18: 1 prose; brackets give the item's own name plus a qualifier (Tobiasz Winter is not shown)
    18: "3:1 4:2 5:4 6:5 7:4",  # 5: 'Sir John Templeton', entry 4's text
    19: "1:1 2:2 3:3 4:4",
    20: "1:1 2:2 3:3 4:4 5:5",
    21: "1:1 2:2 3:3 4:4",
    22: "1:1 2:2 3-5:3 6-7:5",  # wrong qualifier '19th President' ignored
    23: "1-4:3",  # wrong dates ignored (G4)
    24: "1:1 2:2 3:3 4:4 5:5",
    25: "1:2 2:3 3:4 4:5 5:4",
    26: "1:1 2:2 3:3 4:4 5:5",
    27: "3:5 4:4",  # 3: brackets G3; 4: '(Katja Searinger)' a misspelling of A's own name
    28: "1-2:4 3:3 4-5:5",
    # 29: 1: 'Dr. James Anderson', entry 2's known-as name; '(Chemistry)' a qualifier
    29: "1:2 2:3 3:5",
    30: "1:1 2:2 3:3",
    31: "1:1 2:2 3:3 4:4",
    32: "1:1 2:2 3:3 4:5",
    # 33: 2: 'Andreas Nikolaus Lauda', entry 3's full name; 4: 'Elisabeth Junková-Khásová'
    # joins entry 5's known-as given name and full surname, both hers (hard call: not a blend of
    # two people)
    33: "1:3 2:3 3:4 4:5",
    34: "1:1 2:2 3:4 4:5",  # 3: 'Elisabeth Junek', entry 4's known-as; 4: entry 5's full name
    # 35: 1 and 3 copied prompt lines (G5); 4-8 a numbered list of names under 'Context:' that is
    # not the shown list (Niki Lauda left out, full name for van Moorsel, Twigg twice): read as
    # items (hard call; the alternative is '' as a copied prompt)
    35: "4:1 5:2 6:4 7-8:5",
    # 36: the '-' lines 2-3 and 6-7 are sub-bullets describing the numbered item above (G1,
    # hard call)
    36: "1:5 5:5",
    # 37: 'Joseph Joseph F.' names no one (no surname; not an obvious form of Joseph Harry Fowler
    # Connick Jr.); 7 'The answer is:' prose; 8 the list again
    37: "1:2 8:2",
    38: "1:1 2:2 3:3 4:4 5:3",  # 3: entry 3's full name; '(actor)', '(musician)' qualifiers
    39: "1-8:1",  # 2-8: entry 1's full name; 8 cut after the complete name (G4)
    40: "1:1 2:2 3:3 4:4 5:5",
    41: "1:1 2:2 3:3 4:4 5:5",
    42: "1:1 2:2 3:3 5:5",  # 4: 'Darrel Wells', a blend of Darrel Frost and Richard Wells (G2)
    # 43: 3: 'Patricia Ann Donnelly', a blend of Patricia Burrowes and Maureen Ann Donnelly
    # (G2); '(Meg)' brackets (G3)
    43: "4:3",
    # 44: 1, 5: 'E. B. Eddy', the professorship entry 1's text names, not a name of Li (hard
    # call); 4: 'Elizabeth S. S. Sattely', the initial doubled (G2)
    44: "2:2 3:3 4:5",
    45: "1:1 2:2 3:3 4:5 5:4",  # 2: 'Chao-Jun "C.-J." Li'; wrong dates ignored
    46: "1:1 2:2 3:3 4:4",
    # 47: 'Dr. Elizabeth S. S. T.': a given name and initials, no surname (hard call); 3 prose
    47: "",
}


def test_answers_labelled_after_the_rule_was_written_agree_with_the_reader():
    """Measured once, before any change: the rule agreed on 172 of the 174 bullets it
    attributed (98.9%) and missed 2 of 174 labelled (1.1%). The disagreements: the ``-`` lines
    under ``1. Elaine Shaffer`` that repeat her name with dates (answer 36, lines 2 and 6),
    which the rule counted as bullets of her and the reader as the numbered item's
    description; a second reader, blind to the first, read them so too
    (:func:`test_two_readers_agree_on_the_seed_2027_answers`), and since then a two-level list
    written flat is read as when indented (docs/SPEC.md "Attribution"): 172 of 172 agreed. The
    misses, unchanged: ``Elisabeth Junek``, the name entry 4's text says Eliška Junková is also
    known as (answer 34), which shares no word with her title's name, so it confirms a citation
    but never attributes alone (docs/SPEC.md "Attribution": a document's claim), and
    ``Elisabeth Junková-Khásová`` (answer 33), that name's given name with her full surname.
    Per group (by the labelled entry's group): women 73 agreed, 2 of 75 missed (2.7%; before
    the flat-list rule 73 of 75 attributed agreed, 97.3%); men 99 of 99 and 0 of 99. The
    misses' bound holds overall and for men, not for women: one woman's known-as name, n = 75
    (the seed-46 set: women 93 of 93 and 1 of 94 missed, men 89 of 90 and 1 of 90)."""
    answers = json.loads(FIXTURE_SEED2027.read_text(encoding="utf-8"))
    assert len(answers) == len(LABELS_SEED2027) == 48
    topics = {item["topic"] for item in answers}
    held = {item["topic"] for item in json.loads(FIXTURE_SEED46.read_text(encoding="utf-8"))}
    assert not topics & held and all(
        c["text"].startswith("Title: ") for a in answers for c in a["context"]
    )
    attributed, agreed, missed, labelled, disagreements = agreement(answers, LABELS_SEED2027)
    assert (attributed, labelled) == (172, 174), (attributed, labelled)
    assert (agreed, missed) == (172, 2), disagreements
    for group, measured in {"female": (73, 2, 75), "male": (99, 0, 99)}.items():
        # the labels of the group's entries alone: agreed, missed and labelled per group
        _, agreed_g, missed_g, labelled_g, _ = agreement(
            answers, group_labels(answers, LABELS_SEED2027, group)
        )
        assert (agreed_g, missed_g, labelled_g) == measured, group


# -- a second reader of the same held-out answers (issue 33, item 6) ----------------------------

SECOND_READER = Path(__file__).parent / "fixtures" / "seed46_second_reader.json"
"""A second reader's labels of the 48 held-out answers, written blind under GUIDE (before
reading LABELS_SEED46 or running the rule on these answers), with a note per judgement call."""


def readers_agreement(
    first: dict[int, str], second: dict[int, str]
) -> tuple[int, int, float, list[tuple]]:
    """``(items, agreed, kappa, disagreements)`` over the items either reader labelled (a line
    of an answer, keyed as :func:`agreement` keys it): same entry set, or one reader only (a
    disagreement). Cohen's kappa takes each item's label (an entry set, or none) as its class:
    ``(p_o - p_e) / (1 - p_e)``, ``p_e`` from the two readers' label frequencies over these
    items. Lines neither reader labelled are left out (both "none": they would inflate it)."""
    items = agreed = 0
    disagreements = []
    pairs: list[tuple[frozenset[int], frozenset[int]]] = []
    for index in sorted(set(first) | set(second)):
        one, two = _labels(first.get(index, "")), _labels(second.get(index, ""))
        for line in sorted(set(one) | set(two)):
            a, b = frozenset(one.get(line, ())), frozenset(two.get(line, ()))
            pairs.append((a, b))
            items += 1
            agreed += a == b
            if a != b:
                disagreements.append((index, line, set(a) or None, set(b) or None))
    classes = {label for pair in pairs for label in pair}
    expected = (
        sum(sum(a == c for a, _ in pairs) * sum(b == c for _, b in pairs) for c in classes)
        / len(pairs) ** 2
    )
    kappa = (agreed / items - expected) / (1 - expected)
    return items, agreed, kappa, disagreements


def test_two_readers_agree_on_the_held_out_answers():
    """Two readers, one GUIDE, the same 48 answers (measured: 186 items either labelled, 184 by
    the first reader, 186 by the second; they agree on 184, 98.9%, Cohen's kappa 0.986 over the
    items' entry positions; the two disagreements are the second reader crediting
    ``Charles Arlott Fry`` to C. B. Fry, which the first reads as a blend with John Arlott, and
    ``Phra Phuttha Chao Luang``, the name entry 1's text says Chulalongkorn was known by, which
    the first reads as an epithet). The rule against the second reader, with :func:`agreement`:
    183 attributed, 183 agreed (100%), 3 of 186 labelled missed (1.6%: ``Charles Arlott Fry``,
    ``Najibang``, ``King Chul``); before the topic-title and ``He was known ... as`` alias rules
    (docs/SPEC.md, "Attribution"): 180 of 182 agreed (98.9%), 4 of 186 missed (2.2%)."""
    second = json.loads(SECOND_READER.read_text(encoding="utf-8"))
    labels = {int(index): text for index, text in second["labels"].items()}
    assert set(labels) == set(LABELS_SEED46) and "blind" in second["reader"]
    items, agreed, kappa, disagreements = readers_agreement(LABELS_SEED46, labels)
    first_items = sum(len(_labels(text)) for text in LABELS_SEED46.values())
    second_items = sum(len(_labels(text)) for text in labels.values())
    assert (first_items, second_items) == (184, 186), (first_items, second_items)
    report = f"{agreed}/{items} items agree, kappa {kappa:.3f}; (answer, line, 1st, 2nd): "
    assert agreed / items >= 0.98 and kappa >= 0.98, report + repr(disagreements)
    answers = json.loads(FIXTURE_SEED46.read_text(encoding="utf-8"))
    attributed, agreed, missed, labelled, disagreements = agreement(answers, labels)
    assert attributed >= 175
    assert agreed / attributed >= 0.98, disagreements
    assert missed <= 3 and labelled == second_items, missed


SECOND_READER_SEED2027 = Path(__file__).parent / "fixtures" / "seed2027_second_reader.json"
"""A second reader's labels of the 48 seed-2027 answers, written blind under GUIDE (before
reading LABELS_SEED2027 or the rule), with a note per judgement call."""


def test_two_readers_agree_on_the_seed_2027_answers():
    """Measured once: 174 items either labelled, 174 by each reader; they agree on 170 (97.7%,
    Cohen's kappa 0.971). The four disagreements are one slip: answer 23's four ``- Felix
    Ermacora`` lines, which the second reader labelled entry 1 while their own note names Felix
    Ermacora, entry 3's title (the first reader and the rule: entry 3); no judgement differs.
    Both readers read the ``-`` lines under ``1. Elaine Shaffer`` as her item's description and
    credit ``Elisabeth Junek`` and ``Elisabeth Junková-Khásová`` (the rule's two misses). The
    rule against the second reader: 168 of 172 attributed agreed (the four slipped lines), 2 of
    174 missed; per group women 2 of 75 missed, men 0 of 99."""
    second = json.loads(SECOND_READER_SEED2027.read_text(encoding="utf-8"))
    labels = {int(index): text for index, text in second["labels"].items()}
    assert set(labels) == set(LABELS_SEED2027) and "blind" in second["reader"]
    items, agreed, kappa, disagreements = readers_agreement(LABELS_SEED2027, labels)
    assert (items, agreed, round(kappa, 3)) == (174, 170, 0.971), disagreements
    assert {(index, line) for index, line, *_ in disagreements} == {(23, n) for n in range(1, 5)}
    assert all(first == {3} and other == {1} for *_, first, other in disagreements)
    assert "Felix Ermacora" in second["notes"]["23:1"]
    answers = json.loads(FIXTURE_SEED2027.read_text(encoding="utf-8"))
    assert answers[23]["context"][2]["title"] == "Felix Ermacora"  # entry 3
    attributed, agreed, missed, labelled, _ = agreement(answers, labels)
    assert (attributed, agreed, missed, labelled) == (172, 168, 2, 174)


# -- a fourth set: every distinct answer on the topics no set above holds ---------------------

FIXTURE_MORE = Path(__file__).parent / "fixtures" / "smollm2_seed2027_more_answers.json"
"""Every distinct answer (107) of the two seed-2027 arms of issue 35's pre-registered test
(``fairrag study --llm local --threads 1 --concurrency 8 --rankers representative_stochastic
--trials 192 --seed 2027``, under the fitted position curve, then under DCG) on the 15 topics
none of the three sets above holds, each with the five documents shown. Labelled blind under
GUIDE by two readers, blind to each other, who neither ran the rule nor read its code, after
the rule of 70eacc4 was written; measured once."""

MORE_READERS = [
    Path(__file__).parent / "fixtures" / f"seed2027_more_reader{n}.json" for n in (1, 2)
]


def test_a_fourth_set_of_107_answers_on_15_new_topics_per_group():
    """Measured once, with the rule of 70eacc4 (the same with the rule before the flat-list
    change: no answer here writes one). The two readers label the same 487 items alike (100%,
    kappa 1.0; two instances of one AI model under one guide: their agreement bounds, not
    measures, what two people would agree on). The rule agreed on 478 of the 479 bullets it
    attributed (99.8%; ``Beatrix de Witt``, a blend of two shown names, credited to Beatrix of
    the Netherlands) and missed 9 of 487 (1.8%). Per group, by the labelled entry's: women 7 of
    221 missed (3.2%), men 2 of 266 (0.8%): the misses' bound did not hold for women. Women's
    misses: ``Monica La Mitraille`` four times (4 answers; entry's text: ``better known as
    "Machine Gun Molly" (in French: Monica la Mitraille)``, a known-as name in a translation
    the rule did not read), ``Leslie Anne Sankston`` (the alias ``Leslie Marie Sankston`` with
    another middle name), and two names cut inside the surname (``Eleanor Farje``, the last
    line, and ``Leontien Martha Henrica Petronella Zijlaar``, a line not last). Men's:
    ``Rudolph Höss`` for Rudolf Höss, and ``Willem Frederik``, William I's name in his text's
    brackets, sharing no word with the title. Since then (a rule made on this set, so the
    figures after are not held out): a stated name's translation in brackets is a stated name
    (docs/SPEC.md "Citations"): 482 of 483 agreed, 5 of 487 missed (1.0%); women 3 of 221
    (1.4%), men 2 of 266 (0.8%). (A rule completing a name cut on the answer's last line,
    ``Eleanor Farje``, was made too and removed: a review found it credited complete names,
    ``- Thomas Mann`` to Thomas Manning shown, and an answer does not say it was cut.)"""
    answers = json.loads(FIXTURE_MORE.read_text(encoding="utf-8"))
    earlier = set()
    for path in (FIXTURE_SEED46, FIXTURE_SEED2027):
        earlier |= {item["topic"] for item in json.loads(path.read_text(encoding="utf-8"))}
    topics = {item["topic"] for item in answers}
    assert len(answers) == 107 and len(topics) == 15 and not topics & earlier
    assert len({item["answer"] for item in answers}) == 107
    readers = [json.loads(path.read_text(encoding="utf-8")) for path in MORE_READERS]
    first, second = (
        {int(index): text for index, text in reader["labels"].items()} for reader in readers
    )
    assert set(first) == set(second) == set(range(107))
    assert all("blind" in reader["reader"] for reader in readers)
    items, agreed_readers, kappa, _ = readers_agreement(first, second)
    assert (items, agreed_readers, kappa) == (487, 487, 1.0)
    attributed, agreed, missed, labelled, disagreements = agreement(answers, first)
    assert (attributed, agreed, missed, labelled) == (483, 482, 5, 487), disagreements
    assert disagreements == [(95, 3, {2}, None)]
    assert agreed / attributed >= 0.98 and missed <= 0.02 * labelled  # the bound, overall
    for group, measured in {"female": (3, 221), "male": (2, 266)}.items():
        _, _, missed_g, labelled_g, _ = agreement(answers, group_labels(answers, first, group))
        assert (missed_g, labelled_g) == measured, group


# -- a fifth set, held out: written after the rule's changes from the sets above --------------

FIXTURE_NATURAL = Path(__file__).parent / "fixtures" / "smollm2_seed2028_natural_answers.json"
"""Every distinct answer (48) of ``fairrag study --llm local --threads 1 --concurrency 8
--rankers representative_stochastic --trials 48 --seed 2028 --corpus natural --topics <the 12
topics with the most women>``: the natural corpus shows people the balanced sets' samples do
not hold (133 people shown, 98 in no set above). Its plan was written before the run, and its
answers were read by no one but two readers, labelling blind under GUIDE, blind to each other,
until the rule of 884afde (the changes the fourth set led to) was measured on them, once."""

NATURAL_READERS = [
    Path(__file__).parent / "fixtures" / f"seed2028_natural_reader{n}.json" for n in (1, 2)
]


def test_a_fifth_set_held_out_per_group():
    """Measured once with the rule of 884afde (its rule completing a cut name, removed since,
    changed nothing here), against reader 1: the rule agreed on 182 of
    193 attributed bullets (94.3%) and missed 2 of 184 (1.1%); per group women 1 of 102 missed
    (1.0%), men 1 of 82 (1.2%): **the misses' bound held for both groups** on answers no rule
    was made from, **the agreement bound did not**: 10 of the 11 disagreements are one looping
    answer (38) repeating ``Maximilian Karl Emil Weber (2000)`` under ``- Max Weber (2000)``,
    read by both readers as the item's description and by the rule, past its first line, as
    bullets; the 11th, ``Elizabeth George Lobl Konigsburg``, a blend of two shown names, was
    credited to E. L. Konigsburg. The misses: ``Dk Najibah Era Al-Sufi`` (a one-letter slip in
    a hyphenated surname) and a ``-`` line under ``1. James Fairgrieve`` (answer 28), which the
    readers split on (reader 1: an item; reader 2, and the rule since 70eacc4: the item's
    description); against reader 2, 1 of 183 missed. The readers agree on 183 of 184 items
    (kappa 0.993), that line apart. Since then (made on this set: not held out) a name
    repeated on every line under its item is its description: 182 of 183 agreed (99.5%),
    misses unchanged."""
    answers = json.loads(FIXTURE_NATURAL.read_text(encoding="utf-8"))
    assert len(answers) == 48 and len({item["answer"] for item in answers}) == 48
    readers = [json.loads(path.read_text(encoding="utf-8")) for path in NATURAL_READERS]
    first, second = (
        {int(index): text for index, text in reader["labels"].items()} for reader in readers
    )
    assert set(first) == set(second) == set(range(48))
    items, agreed_readers, kappa, between = readers_agreement(first, second)
    assert (items, agreed_readers, round(kappa, 3)) == (184, 183, 0.993)
    assert between == [(28, 2, {1}, None)]
    attributed, agreed, missed, labelled, disagreements = agreement(answers, first)
    assert (attributed, agreed, missed, labelled) == (183, 182, 2, 184), disagreements
    assert disagreements == [(22, 2, {1}, None)]
    assert agreement(answers, second)[:4] == (183, 182, 1, 183)
    for group, measured in {"female": (1, 102), "male": (1, 82)}.items():
        _, _, missed_g, labelled_g, _ = agreement(answers, group_labels(answers, first, group))
        assert (missed_g, labelled_g) == measured, group
