"""The local model's running batch (fairrag_study.decoding; docs/SPEC.md, "The study" →
Local batches): rows admitted between steps, a prompt longer than the batch, rows leaving,
and the threads of one LocalChatModel passing the batch between them; every answer the one
its prompt gets alone from transformers' ``generate``. The real SmolLM2-135M, 24 tokens."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from fairrag_study.decoding import Decoder, greedy_batch
from fairrag_study.local_llm import LocalChatModel
from tests.study.conftest import LoadedModel
from tests.study.local_llm_test import SHOWN, _prompts

pytestmark = pytest.mark.integration

TOKENS = 24


@pytest.fixture(scope="module")
def loaded(local_model: LoadedModel) -> tuple[Any, Any, LocalChatModel]:
    llm = LocalChatModel(max_tokens=TOKENS, threads=1)
    return local_model.tokenizer, local_model.model, llm


def _conversations() -> list[list[Any]]:
    """The three study prompts (211-238 tokens) and a short question (35): answers of 11, 22
    and 24 tokens (the cap) and 24."""
    return [*_prompts(), [HumanMessage("Name one woman mathematician.")]]


def _alone(tokenizer: Any, model: Any, prompt: list[int]) -> list[int]:
    """transformers' ``generate``, this prompt alone, greedy: its new tokens."""
    import torch

    with torch.inference_mode():
        output = model.generate(
            torch.tensor([prompt]),
            attention_mask=torch.ones((1, len(prompt)), dtype=torch.long),
            max_new_tokens=TOKENS,
            do_sample=False,
            pad_token_id=tokenizer.eos_token_id,
        )
    return [int(t) for t in output[0][len(prompt) :]]


@pytest.fixture(scope="module")
def prompts_and_answers(loaded: tuple[Any, Any, LocalChatModel]) -> tuple[list, list]:
    tokenizer, model, llm = loaded
    prompts = [llm._prompt(tokenizer, messages) for messages in _conversations()]
    return prompts, [_alone(tokenizer, model, p) for p in prompts]


def _run(decoder: Decoder, plan: dict[int, list[int]], prompts: list[list[int]]) -> dict:
    """Step ``decoder`` until it is empty, admitting ``plan[step]``'s prompts before that
    step; the answers by prompt, and the batch's width before each step."""
    import torch

    answers: dict[int, list[int]] = {}
    widths: list[int] = []
    step = 0
    with torch.inference_mode():
        while step <= max(plan) or len(decoder):
            for index in plan.get(step, []):
                decoder.admit(prompts[index], index)
            if len(decoder):
                widths.append(decoder._mask.shape[1])
                assert decoder._mask[:, 0].any(), "a column of padding only is kept"
                assert decoder._mask.sum(-1).tolist() == [  # every row's own tokens, no more
                    len(prompts[key]) + len(decoder._rows[at].tokens)
                    for at, key in enumerate(decoder.keys)
                ]
            answers.update(decoder.step())
            step += 1
    return {"answers": answers, "widths": widths}


def test_a_row_admitted_while_others_decode_gets_the_answer_it_gets_alone(
    loaded, prompts_and_answers
):
    """The longest prompt first; the short question five tokens later, left-padded to the
    batch; when the long answer ends, the columns only it held are dropped."""
    tokenizer, model, _ = loaded
    prompts, alone = prompts_and_answers
    assert [len(p) for p in prompts] == [221, 211, 238, 35]
    assert [len(a) for a in alone] == [24, 11, 22, 24]
    decoder = Decoder(model, TOKENS, tokenizer.eos_token_id)
    run = _run(decoder, {0: [2], 5: [3]}, prompts)
    assert run["answers"] == {2: alone[2], 3: alone[3]}
    widths = run["widths"]
    assert widths[5] == 238 + 5  # the short prompt was padded to the batch, not the reverse
    assert min(widths[22:]) < 35 + TOKENS  # once the long answer left, its columns went too


def test_a_prompt_longer_than_the_batch_moves_the_rows_held_and_rows_leave_mid_batch(
    loaded, prompts_and_answers
):
    """The short question first; a 238-token prompt three tokens later (the held row is
    padded on the left); a 211-token prompt at the sixth token, whose answer ends after 11
    tokens and leaves the other two running."""
    tokenizer, model, _ = loaded
    prompts, alone = prompts_and_answers
    decoder = Decoder(model, TOKENS, tokenizer.eos_token_id)
    run = _run(decoder, {0: [3], 3: [2], 6: [1]}, prompts)
    assert run["answers"] == {3: alone[3], 2: alone[2], 1: alone[1]}
    assert run["widths"][3] == 238
    batched = greedy_batch(model, prompts, TOKENS, tokenizer.eos_token_id, max_rows=2)
    assert batched == alone


def test_threads_pass_the_batch_between_them_and_each_gets_its_own_answer(
    loaded, prompts_and_answers
):
    """Four calls from four threads, at most two rows at once: the calls wait, are admitted
    as rows leave, and whichever caller is waiting advances the batch until its own answer
    ends; every answer and its token counts are the call's own."""
    tokenizer, _, _ = loaded
    prompts, alone = prompts_and_answers
    llm = LocalChatModel(max_tokens=TOKENS, threads=1, max_batch=2)
    texts = [tokenizer.decode(a, skip_special_tokens=True).strip() for a in alone]
    returned: list[int] = []
    lock = threading.Lock()

    def call(index: int) -> Any:
        message = llm.invoke(_conversations()[index])
        with lock:
            returned.append(index)
        return message

    with ThreadPoolExecutor(4) as pool:
        messages = list(pool.map(call, range(4)))
    assert [m.content for m in messages] == texts
    for message, prompt, answer in zip(messages, prompts, alone, strict=True):
        usage = message.usage_metadata
        assert (usage["input_tokens"], usage["output_tokens"]) == (len(prompt), len(answer))
    assert sorted(returned) == [0, 1, 2, 3]
    assert llm._decoder is not None and len(llm._decoder) == 0 and not llm._waiting


def test_a_call_that_cannot_be_answered_fails_alone(loaded):
    """In the paper's format, a call without titles among calls with them: a ValueError for
    it, the others answered as one at a time."""
    paper = LocalChatModel(max_tokens=TOKENS, threads=1, max_batch=2, answer_format="paper")
    titles = [[title for title, _ in shown] for shown in SHOWN]
    expected = [text for text, _ in paper.complete_many(_prompts(), titles=titles)]

    def call(index: int) -> Any:
        if index == 3:
            return paper.invoke(_prompts()[0])  # no titles
        return paper.invoke(_prompts()[index], titles=titles[index]).content

    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(call, index) for index in range(4)]
    assert [f.result() for f in futures[:3]] == expected
    with pytest.raises(ValueError, match="needs the shown titles"):
        futures[3].result()
    with pytest.raises(ValueError, match="max_rows must be at least 1"):
        greedy_batch(None, [[1]], 4, 0, max_rows=0)
    with pytest.raises(ValueError, match="max_new_tokens must be at least 1"):
        Decoder(None, 0, 0)


def test_a_failing_step_fails_the_rows_it_held_and_the_model_goes_on(loaded, monkeypatch):
    """A step that raises: the call held gets the error (no caller is left waiting), and the
    next call is answered as before."""
    short = _conversations()[3]
    llm = LocalChatModel(max_tokens=4, threads=1, max_batch=2)
    expected = llm.invoke(short).content
    step, failures = Decoder.step, []

    def failing_once(self: Decoder) -> Any:
        if not failures:
            failures.append(self.keys)
            raise RuntimeError("the step failed")
        return step(self)

    monkeypatch.setattr(Decoder, "step", failing_once)
    with pytest.raises(RuntimeError, match="the step failed"):
        llm.invoke(short)
    assert len(failures[0]) == 1 and not llm._waiting and len(llm._decoder) == 0
    assert llm.invoke(short).content == expected


def test_rows_that_ended_in_a_step_whose_model_call_failed_are_not_lost(
    loaded, prompts_and_answers
):
    """The 11-token answer ends in the step whose model call (for the row still going)
    raises: clear() names both rows, so no caller waits for an answer never given back."""
    tokenizer, model, _ = loaded
    prompts, alone = prompts_and_answers
    calls: list[int] = []

    def failing_at_the_thirteenth_call(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 13:  # 2 prompts read, then the model call of the 11th step
            raise RuntimeError("the model call failed")
        return model(*args, **kwargs)

    failing_at_the_thirteenth_call.config = model.config  # type: ignore[attr-defined]
    decoder = Decoder(failing_at_the_thirteenth_call, TOKENS, tokenizer.eos_token_id)
    import torch

    with torch.inference_mode():
        decoder.admit(prompts[0], 0)
        decoder.admit(prompts[1], 1)
        for _ in range(10):
            assert decoder.step() == []
        with pytest.raises(RuntimeError, match="the model call failed"):
            decoder.step()
    assert len(alone[1]) == 11 and decoder.clear() == [1, 0] and len(decoder) == 0


def test_a_copy_with_other_fields_decodes_its_own_calls(loaded):
    """``model_copy(update={"max_tokens": 4})`` called at the same time as the original: each
    call is capped by its own instance (they shared one queue and batch before), and a deep
    copy has its own too."""
    import copy

    original = LocalChatModel(max_tokens=TOKENS, threads=1)
    capped = original.model_copy(update={"max_tokens": 4})
    assert capped._waiting is not original._waiting and capped._turn is not original._turn
    assert copy.deepcopy(original)._lock is not original._lock
    start = threading.Barrier(2)

    def call(llm: LocalChatModel) -> int:
        start.wait(timeout=60)
        return llm.invoke(_conversations()[3]).usage_metadata["output_tokens"]

    with ThreadPoolExecutor(2) as pool:
        counts = list(pool.map(call, [original, capped]))
    assert counts == [TOKENS, 4]
