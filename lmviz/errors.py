"""The one kind of error a learner is shown: its message is one plain-text sentence that says what went wrong
and what to do, never a traceback. It is written for the reader, so it may quote what they typed; whatever
shows it escapes it (lmviz.app.problems.show_problem), because that text may hold Markdown or HTML.

This module imports nothing, so that every layer, the torch-free ones included, can raise and catch these."""


class LearnerError(Exception):
    """Something the learner or the visitor can act on; ``str(error)`` is the sentence they are shown."""


class BadInput(LearnerError, ValueError):
    """A setting or a typed token the computation cannot use (a learning rate, a temperature, a group's size...),
    in any lesson; the message is one sentence saying why."""


class NothingToScore(LearnerError, ValueError):
    """The text gives the model nothing to predict; the message says why."""


class OtherTextUnusable(NothingToScore):
    """Only the second text (scored before and after a step, never learnt) gives nothing to predict: the step on
    the first text can still be taken and shown."""


class ChatTemplateError(LearnerError, ValueError):
    """The tokenizer's chat template cannot be used for this lesson; the message is one sentence."""


class NoChatTemplate(ChatTemplateError):
    """The tokenizer has no chat template (a base model, or lmviz's own tiny GPT)."""


class ModelLoadError(LearnerError, RuntimeError):
    """A model could not be loaded; the message is one sentence for the learner."""


class NotEnoughMemory(LearnerError, RuntimeError):
    """The device ran out of memory while scoring; the message says how much was needed."""

    def __init__(self, message: str, device: str):
        super().__init__(message)
        self.device = device


class ScorerUnavailable(LearnerError, RuntimeError):
    """The shared scorer (LMVIZ_SCORER_URL) did not answer, or not in time; the message says so and what was done
    instead."""
