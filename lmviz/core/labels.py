"""The label conventions every objective shares with Hugging Face, and the masked-LM branches: plain Python
(no torch), so that the questions and the figures can name them too."""

import enum

# Hugging Face's convention: a label of -100 means "this position does not count".
IGNORE_INDEX = -100

# Which NSP label means "sentence B really follows sentence A".
# Hugging Face's BertForPreTraining (and the original BERT) use 0;
# language_modeling_losses.py, the module lmviz grew from, used 1. lmviz follows Hugging Face.
IS_NEXT_HF = 0
IS_NEXT_FLIPPED = 1


class Branch(enum.IntEnum):
    """What happened at a position: the values of MlmMask.branch (ints, so that tensors hold them)."""

    NOT_SELECTED = 0
    MASKED = 1  # replaced by the mask token
    RANDOM = 2  # replaced by a random token
    KEPT = 3  # selected, left as it is

    @property
    def words(self) -> str:
        """The branch as a page or the CLI shows it."""
        return {Branch.NOT_SELECTED: "not selected", Branch.MASKED: "[MASK]", Branch.RANDOM: "random token",
                Branch.KEPT: "kept"}[self]
