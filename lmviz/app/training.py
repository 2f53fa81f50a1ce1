"""The two lessons that train, One step of learning and RL fine-tuning: their results, cached for every session,
and the warm start's computing of each page's default result, so that a class that opens the page together finds
it ready instead of waiting for the first of them to compute it.

Each function is keyed as Streamlit keys a cached function (its arguments, those named with a leading underscore
left out): the warm start calls them with the very arguments a page's defaults give, the page's first visit then
reads the result."""

from __future__ import annotations

import streamlit as st

from lmviz.app.steps import gated
from lmviz.core.trl import TRL
from lmviz.lessons import gradient_step as step_lesson
from lmviz.lessons import grpo
from lmviz.lessons.gradient_step import adamw_first_step, logit_gradient, return_freed_memory, sgd_steps
from lmviz.serving.scorer import CausalScorer

GRADIENT_TOP = 2  # the two largest other entries: a third pushed the table past 818 px beside an open sidebar


@st.cache_data(show_spinner=False, max_entries=32)
def cached_gradient(_scorer: CausalScorer, model_key: tuple, text: str):
    return _scorer.run(lambda loaded: logit_gradient(loaded, text, top=GRADIENT_TOP), text)


@st.cache_data(show_spinner=False, max_entries=32)
def cached_sgd_steps(_scorer: CausalScorer, model_key: tuple, text: str, lr: float, steps: int, other: str | None,
                     _progress=None, max_norm: float | None = None, warmup: int | None = None):
    try:
        return _scorer.run(lambda loaded: gated("sgd", loaded, lambda: sgd_steps(
            loaded, text, lr, steps, other, progress=_progress, max_norm=max_norm, warmup=warmup)), text, other)
    finally:
        return_freed_memory()


@st.cache_data(show_spinner=False, max_entries=32)
def cached_adamw(_scorer: CausalScorer, model_key: tuple, text: str, lr: float):
    try:
        return _scorer.run(lambda loaded: gated("adamw", loaded, lambda: adamw_first_step(loaded, text, lr)), text)
    finally:
        return_freed_memory()


@st.cache_data(show_spinner=False, max_entries=32)
def cached_group(_scorer: CausalScorer, model_key: tuple, prompt: str, size: int, seed: int, temperature: float,
                 limit: int, _progress=None):
    return _scorer.run(lambda loaded: grpo.sample_group(loaded, prompt, size, seed, temperature, limit, _progress),
                       prompt)


@st.cache_data(show_spinner=False, max_entries=32)
def cached_grpo_step(_scorer: CausalScorer, model_key: tuple, _group, group_key: tuple, advantages: tuple, lr: float,
                     loss_type: str, level: str, epsilon: float, epsilon_high: float, beta: float, updates: int,
                     kl_bias_correction: bool, _progress=None):
    return _scorer.run(lambda loaded: gated("grpo", loaded, lambda: grpo.grpo_step(
        loaded, _group, list(advantages), lr, loss_type, level, epsilon, epsilon_high, beta=beta, updates=updates,
        kl_bias_correction=kl_bias_correction, progress=_progress)))


def group_key(prompt: str, size: int, seed: int, temperature: float, limit: int) -> tuple:
    """What a group is known by in the step's cache (the group itself is not hashed)."""
    return prompt, int(size), int(seed), float(temperature), int(limit)


def warm_defaults(scorer: CausalScorer) -> None:
    """Each training page's result for its defaults, computed into the caches the pages read: One step of
    learning's gradient and steps, RL fine-tuning's group and its step."""
    key = scorer.cache_key
    cached_gradient(scorer, key, step_lesson.DEFAULT_TEXT)
    cached_sgd_steps(scorer, key, step_lesson.DEFAULT_TEXT, step_lesson.DEFAULT_RATE, step_lesson.DEFAULT_STEPS,
                     step_lesson.DEFAULT_OTHER)
    settings = (grpo.DEFAULT_PROMPT, grpo.DEFAULT_GROUP, grpo.DEFAULT_SEED, grpo.DEFAULT_TEMPERATURE,
                grpo.DEFAULT_LIMIT)
    group = cached_group(scorer, key, *settings)
    cached_grpo_step(scorer, key, group, group_key(*settings), tuple(grpo.default_advantages(group)), grpo.DEFAULT_RATE,
                     TRL.loss_type, grpo.TOKEN, grpo.DEFAULT_EPSILON, grpo.DEFAULT_EPSILON, grpo.DEFAULT_BETA,
                     grpo.DEFAULT_UPDATES, TRL.use_bias_correction_kl)
