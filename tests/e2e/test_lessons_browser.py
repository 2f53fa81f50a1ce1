"""Next token and Chat fine-tuning loss in a real browser, on a 1280×720 projector: the result of each
control is on screen with it, and user text stays text."""

import torch
from playwright.sync_api import expect

from lmviz.core.numbers import fmt
from lmviz.core.text import readable_token
from lmviz.lessons.chat_loss import analyse_sft
from tests.e2e.helpers import assert_no_error, metric, settle


def test_next_token_generates_step_by_step_with_the_result_on_screen(projector, server, bundled):
    projector.goto(f"{server}/next-token")
    settle(projector)
    greedy = metric(projector, "Greedy choice (the highest logit)")
    expect(greedy).to_have_text("␣Paris", timeout=120_000)
    expect(greedy).to_be_in_viewport(ratio=1)
    projector.get_by_role("button", name="Append the greedy token, ␣Paris").click()
    box = projector.get_by_label("The beginning of a text")
    expect(box).to_have_value("The capital of France is Paris", timeout=120_000)
    settle(projector)
    ids = bundled.tokenizer("The capital of France is Paris", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        after = int(bundled.model(input_ids=torch.tensor([ids])).logits[0, -1].argmax())
    expect(greedy).to_have_text(readable_token(bundled.tokenizer, after), timeout=120_000)
    expect(greedy).to_be_in_viewport(ratio=1)  # pinned: on screen with the button, far below it
    assert_no_error(projector)


def test_chat_loss_follows_the_answer_and_shows_typed_markup_as_text(projector, server, bundled):
    projector.goto(f"{server}/chat-loss")
    settle(projector)
    loss = metric(projector, "Answer-only loss (SFT)")
    expected = analyse_sft(bundled, "What is the capital of France?", "The capital of France is Paris.")
    expect(loss).to_have_text(fmt(expected.loss_answer), timeout=120_000)
    hostile = "<script>alert(1)</script> **Paris** $x$"
    box = projector.get_by_label("Assistant's answer (the text fine-tuning teaches)")
    box.fill(hostile)
    box.press("Enter")
    typed = analyse_sft(bundled, "What is the capital of France?", hostile)
    expect(loss).to_have_text(fmt(typed.loss_answer), timeout=120_000)
    expect(loss).to_be_in_viewport(ratio=1)
    settle(projector)
    assert_no_error(projector)
    main = projector.locator("[data-testid='stMain']")
    chips = main.locator(".lmviz-sentence")
    expect(chips).to_contain_text("script")  # the chips show the typed characters, token by token
    assert chips.locator("script, strong").count() == 0 and main.locator(".katex").count() == 0
