"""Answers per CPU-second of ``--llm local`` (SmolLM2-135M), one prompt at a time against
batched, free answers against the paper's format.

Run: ``.venv/bin/python benchmarks/bench_local_llm.py [--prompts 8] [--batch 8]
[--threads 1] [--formats free,paper] [--max-tokens 160]``. Two modes per format:
``generate`` (transformers' ``generate``, one prompt at a time: ``--llm local`` before
:func:`fairrag_study.decoding.greedy_batch`), then ``batched``: ``complete_many`` on
``--batch`` prompts at a time (each batch runs until its longest answer ends), then
``threads``: ``--batch`` threads each calling ``invoke`` on the next prompt, the model's
running batch (``max_batch`` = ``--batch``; what ``fairrag study --concurrency N`` does)
admitting a waiting call whenever an answer ends. The prompts are the study's: the
paper's prompt (:func:`fairrag_core.kit.render_context_prompt`) over five documents of one
TREC topic (``FAIRRAG_DATA``), the four scenarios in turn. Each mode answers every prompt;
printed per mode: the process's CPU seconds (``time.process_time``: every thread of the
process), answers per CPU-second, its ratio to free answers from ``generate``, tokens
generated, whether each answer equals ``generate``'s of the same format, and, for
the paper's format, how many answers the paper's parser reads a shown title in (the paper's
generation parity is measured). The model is loaded (and warmed on one short prompt) before
any timing.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from langchain_core.messages import HumanMessage  # noqa: E402

from fairrag_core.citations import ground_citations, parse_citations  # noqa: E402
from fairrag_core.kit import render_context_prompt  # noqa: E402
from fairrag_core.prompts import scenario_question  # noqa: E402
from fairrag_study.local_llm import LocalChatModel, _load  # noqa: E402
from fairrag_study.paper_format import PaperFormatProcessor, paper_format  # noqa: E402


def study_prompts(data: Path, count: int, k: int = 5) -> list[tuple[str, list[str]]]:
    """``count`` study prompts and their shown titles: ``k`` documents of one topic each."""
    topics: dict[str, list[tuple[str, str]]] = defaultdict(list)
    with data.open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            if row["first sentence"].strip():
                topics[row["q_text"]].append((row["doc_title"], row["first sentence"]))
    prompts = []
    names = sorted(topics)
    for i in range(count):
        topic = names[i % len(names)]
        shown = topics[topic][(i // len(names)) * k :][:k]
        question = scenario_question(i % 4 + 1, topic)
        prompts.append((render_context_prompt(question, shown), [t for t, _ in shown]))
    return prompts


def reference_answers(
    llm: LocalChatModel, prompts: list[str], titles: list[list[str]]
) -> list[str]:
    """Each prompt answered alone by transformers' ``generate`` (``--llm local`` before
    ``greedy_batch``; for the paper's format with its processor)."""
    import torch

    tokenizer, model = _load(llm.model_name, llm.threads)
    answers = []
    for prompt, shown in zip(prompts, titles, strict=True):
        encoded = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}],
            add_generation_prompt=True,
            return_tensors="pt",
            return_dict=True,
        )
        ids = encoded["input_ids"]
        processors = []
        if llm.answer_format == "paper":
            spec = paper_format(tokenizer)
            processors = [PaperFormatProcessor(spec, [shown], llm.max_tokens)]
        with torch.inference_mode():
            output = model.generate(
                ids,
                attention_mask=encoded["attention_mask"],
                max_new_tokens=llm.max_tokens,
                do_sample=False,
                pad_token_id=tokenizer.eos_token_id,
                logits_processor=processors or None,
            )
        answers.append(
            tokenizer.decode(output[0][ids.shape[1] :], skip_special_tokens=True).strip()
        )
    return answers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--formats", default="free,paper")
    parser.add_argument("--max-tokens", type=int, default=160)
    args = parser.parse_args()
    data = Path(os.environ.get("FAIRRAG_DATA", ROOT / "data" / "trec_gender_2022.csv"))
    prompts = study_prompts(data, args.prompts)
    conversations = [[HumanMessage(p)] for p, _ in prompts]
    titles = [t for _, t in prompts]
    baseline = None
    for answer_format in args.formats.split(","):
        llm = LocalChatModel(
            threads=args.threads,
            max_tokens=args.max_tokens,
            answer_format=answer_format,
            max_batch=args.batch,
        )
        llm.complete_many([[HumanMessage("Hello")]], titles=[["Warm Up"]])
        reference: list[str] = []
        for mode, batch in (("generate", 1), ("batched", args.batch), ("threads", args.batch)):
            started = time.process_time()
            if mode == "generate":
                texts = reference_answers(llm, [p for p, _ in prompts], titles)
                tokens = None
            elif mode == "threads":
                with ThreadPoolExecutor(batch) as pool:
                    messages = list(
                        pool.map(lambda c, t, m=llm: m.invoke(c, titles=t), conversations, titles)
                    )
                texts = [str(m.content) for m in messages]
                tokens = sum(
                    m.usage_metadata["output_tokens"] for m in messages if m.usage_metadata
                )
            else:
                answers = []
                for at in range(0, len(prompts), batch):
                    part = slice(at, at + batch)
                    answers.extend(llm.complete_many(conversations[part], titles=titles[part]))
                texts = [text for text, _ in answers]
                tokens = sum(usage["output_tokens"] for _, usage in answers)
            cpu = time.process_time() - started
            rate = len(texts) / cpu
            baseline = baseline or rate
            reference = reference or texts
            same = sum(a == b for a, b in zip(texts, reference, strict=True))
            line = (
                f"{answer_format:5s} {mode} batch {batch}: {len(texts)} answers in {cpu:.1f} "
                f"CPU-s = {rate:.3f} answers/CPU-s ({rate / baseline:.2f}x free generate one "
                f"at a time), {tokens or '-'} tokens, {same}/{len(texts)} equal to generate's"
            )
            if answer_format == "paper":
                measured = sum(
                    any(g.valid for g in ground_citations(parse_citations(text), shown))
                    for text, shown in zip(texts, titles, strict=True)
                )
                line += f", paper parity measured for {measured}/{len(texts)}"
            print(line, flush=True)


if __name__ == "__main__":
    main()
