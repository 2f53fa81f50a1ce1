import streamlit as st

from lmviz.classroom import answered, progress_sentence, term, terms_linked
from lmviz.lesson import ANSWERED_PARAM, PATH, next_to_study, progress_code

st.title("How is a language model's training loss computed?")
st.markdown(
    """
Language models learn by lowering one number, the **loss**. lmviz shows where
that number comes from: every probability, every logarithm and every average,
on a worked example and on real models, so that you can check each step by hand.

It is made for a teacher projecting it in class, for students typing their own
sentences, and for anyone learning on their own. It needs no internet: its
models ship with it. Words in blue link to the glossary.
"""
)

st.subheader("Your path")
done = answered()
st.markdown("The pages below form one lesson, in this order. Each says what it teaches, ends with questions "
            "made from its own numbers (to check yourself, or for a teacher to ask the room), and links to the next.")
st.caption(terms_linked(progress_sentence(done) + " " + " · ".join(
    f"{step.title} {sum(step.key(q) in done for q in step.questions)}/{len(step.questions)}" for step in PATH)))
following = next_to_study(done)
if following:
    code = progress_code(done)
    st.page_link(following.page, label=f"{'Continue' if done else 'Start'} with {following.title}",
                 icon=":material/play_arrow:", query_params={ANSWERED_PARAM: code} if code else None)
else:
    st.success("You have answered every question on the path.", icon=":material/school:")

st.subheader("Start here")
st.page_link("app_pages/toy_example.py", label="Toy example: the loss of one sentence, by hand", icon=":material/calculate:")
st.markdown(
    f"A 10-word vocabulary and the sentence *I love dogs not cats*: the {term('labels', 'label')} are the input "
    "shifted by one "
    "place, the probability of each true next word is picked out of a table, and the loss is the mean of "
    "their negative logarithms, **0.86302**. Change the probabilities and watch the loss follow."
)

st.subheader("Causal language models (GPT, Llama)")
st.page_link("app_pages/your_sentence.py", label="Your sentence: a real model's loss, token by token",
             icon=":material/edit_note:")
st.markdown(f"Predict each next {term('token', 'token')} from the ones before it: each token but the last is asked "
            "for the one after it, so each token but the first is a label, scored by -log p. The first is scored "
            f"too when a {term('start-of-text token', 'BOS / EOS')} is put before it.")
st.page_link("app_pages/next_token.py", label="Next token: where the probabilities come from",
             icon=":material/casino:")
st.markdown(f"The model's scores for every token that could come next, the {term('softmax', 'softmax')} that turns "
            f"them into probabilities, the {term('temperature', 'temperature')} and greedy or sampled choices of a "
            "generator, and -log p of the true next token: the loss of one position.")
st.page_link("app_pages/chat_loss.py", label="Chat fine-tuning loss: only the answer counts", icon=":material/forum:")
st.markdown(f"A conversation written out by a chat model's own template, and the loss supervised fine-tuning "
            f"trains it with: {term('-100', '-100 / ignore_index')} on every label but the answer's; two answers "
            "compared, and the preference loss (DPO) built from the same numbers.")
st.page_link("app_pages/batches.py", label="Batches and padding: several sentences in one training step",
             icon=":material/view_agenda:")
st.markdown(f"{term('Padding', 'padding')}, {term('-100', '-100 / ignore_index')} labels, and why the batch's loss "
            "is a mean over tokens, not over sentences.")

st.subheader("BERT")
st.page_link("app_pages/masked_lm.py", label="Masked LM: fill in the blanks", icon=":material/theater_comedy:")
st.page_link("app_pages/next_sentence.py", label="Next-sentence prediction: does B follow A?",
             icon=":material/compare_arrows:")
st.page_link("app_pages/bert_loss.py", label="BERT's pre-training loss: both at once", icon=":material/functions:")
st.markdown(
    f"Hide about 15 % of the tokens (80 % become {term('[MASK]', '[CLS] / [SEP] / [MASK]')}, 10 % a random token, "
    "10 % stay as they were) and "
    "predict the originals, scoring only those positions; and decide whether sentence B follows sentence A."
)

st.subheader("Training")
st.page_link("app_pages/train.py", label="Train: watch a model learn", icon=":material/monitoring:")
st.markdown("Pre-train a tiny GPT or BERT from scratch and watch its loss fall from about ln V, a uniform guess; "
            "for next-token prediction, toward the stories' own entropy, which no model beats on average.")

st.subheader("Words")
st.page_link("app_pages/glossary.py", label="Glossary: every term the pages use, defined", icon=":material/menu_book:")
