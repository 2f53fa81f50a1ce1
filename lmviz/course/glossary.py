"""The words the pages use, each defined once: the Glossary page shows them, and every
page links a term's first use to its entry (``link``, through lmviz.app.chrome.term), so a learner who meets a word
for the first time is one click from what it means. Plain data: no Streamlit, no torch.
"""

from __future__ import annotations

import re

# term -> (the words that count as a use of it on a page, its definition)
TERMS: dict[str, tuple[tuple[str, ...], str]] = {
    "token": (("token", "tokens"),
              "A piece of text the model reads as one unit: a word, part of a word, a space with a word, or a "
              "punctuation mark. The tokenizer cuts text into tokens and gives each one an id, its index in the "
              "model's vocabulary of V tokens."),
    "label": (("label", "labels"),
              "The token the model should have predicted at a position. For a causal LM the labels are the inputs "
              "shifted one place to the left: the label at position t is the token at position t + 1."),
    "logit": (("logit", "logits"),
              "The raw score a model gives each token of its vocabulary before softmax: any real number, higher "
              "meaning more likely. Only differences between logits matter."),
    "softmax": (("softmax",),
                "Turns logits z into probabilities: p_i = exp(z_i) / Σ_j exp(z_j). Every p_i is between 0 and 1, "
                "they add up to 1, and the largest logit gets the largest probability."),
    "temperature": (("temperature",),
                    "A number T that the logits are divided by before softmax when text is generated: T < 1 "
                    "sharpens the distribution toward the top token, T > 1 flattens it, T = 1 is the model's own. "
                    "Training always uses T = 1."),
    "log-probability": (("log-probability", "log p", "log_softmax"),
                        "log p, the natural logarithm of a probability: 0 for p = 1, negative below. log_softmax "
                        "computes it from the logits directly, which stays exact where p is too small for float32."),
    "cross-entropy": (("cross-entropy",),
                      "The training loss of a classifier: -log p(the true answer), averaged over the predictions. "
                      "A language model is a classifier over its vocabulary at every position."),
    "nats": (("nats", "nat"),
             "The unit of a loss computed with the natural logarithm (ln). 1 nat = 1 / ln 2 ≈ 1.443 bits. A loss "
             "of L nats means the true token got probability exp(-L) on average (geometrically)."),
    "perplexity": (("perplexity",),
                   "exp(loss): the number of equally likely tokens the model is, on average, choosing between. "
                   "A uniform guess over V tokens has perplexity V and loss ln V."),
    "BOS / EOS": (("BOS", "EOS", "start-of-text token", "end-of-text token"),
                  "Beginning- and end-of-sequence tokens: special tokens that mark where a text starts and ends. "
                  "Which token plays which role is a property of each tokenizer (its bos_token and eos_token); "
                  "the pages read them from the tokenizer in use."),
    "padding": (("padding", "pad", "pads", "padded"),
                "Filler tokens that make the sentences of a batch the same length. The attention mask marks them "
                "(0 = pad) so that no real token attends to them, and their labels are -100 so they never count."),
    "-100 / ignore_index": (("-100", "ignore_index"),
                            "The label value that PyTorch's cross_entropy and Hugging Face's models skip: a position "
                            "labelled -100 adds nothing to the loss and is not counted in its mean."),
    "WordPiece ##": (("WordPiece", "##"),
                     "BERT's tokenizer. A word it does not know whole is split into known pieces; a piece that "
                     "continues a word starts with ##, so 'playing' can become 'play' + '##ing'."),
    "[CLS] / [SEP] / [MASK]": (("[CLS]", "[SEP]", "[MASK]"),
                               "BERT's special tokens: [CLS] starts every input (the next-sentence head reads its "
                               "output), [SEP] ends each sentence, and [MASK] hides a token the model must recover."),
}


def anchor(term: str) -> str:
    """The term's anchor on the Glossary page: lower case, letters and digits joined by '-'."""
    return re.sub(r"[^a-z0-9]+", "-", term.lower()).strip("-") or "term"


def link(word: str, term: str, query: str = "") -> str:
    """Markdown for ``word`` linking to ``term``'s entry on the Glossary page, a path relative to the
    page's own (Streamlit opens it in a new tab; ``query``, e.g. "?present=1", carries settings there)."""
    if term not in TERMS:
        raise KeyError(f"{term!r} is not in the glossary.")
    shown = word.replace("[", "\\[").replace("]", "\\]")
    return f"[{shown}](glossary{query}#{anchor(term)})"


def uses(word: str) -> str:
    """A regular expression for ``word`` as a whole word ("label", not in "labelled"), any case if written in
    lower case."""
    return rf"(?{'i' if word.islower() else ''}:(?<![\w\\-]){re.escape(word)}(?![\w-]))"


def link_first_uses(text: str, query: str = "") -> str:
    """Plain ``text`` with each term's first use linked (see ``link``): for lines written once for every page,
    such as the lesson path's, that come before the page's own words."""
    firsts = []
    for term, (words, _) in TERMS.items():
        found = [match for word in words for match in re.finditer(uses(word), text)]
        if found:
            firsts.append((min(found, key=lambda match: match.start()), term))
    pieces, done = [], 0
    for match, term in sorted(firsts, key=lambda first: (first[0].start(), -first[0].end())):
        if match.start() >= done:  # not inside a longer term linked just before
            pieces += [text[done:match.start()], link(match.group(), term, query)]
            done = match.end()
    return "".join(pieces) + text[done:]
