import streamlit as st

st.title("How is a language model's training loss computed?")
st.markdown(
    """
Language models learn by lowering one number, the **loss**. lmviz shows where
that number comes from: every probability, every logarithm and every average,
on a worked example and on real models, so that you can check each step by hand.

It is made for a teacher projecting it in class, for students typing their own
sentences, and for anyone learning on their own.
"""
)

st.subheader("The pages")
st.page_link("pages/toy_example.py", label="Toy example", icon=":material/calculate:")
st.markdown(
    """
A 10-word vocabulary and the sentence *I love dogs not cats*: the labels are the
input shifted by one place, the model's probability of each true next word is
picked out of a table, and the loss is the mean of their negative logarithms,
**0.86302**. Change the probabilities and watch the loss follow.
"""
)

st.subheader("The objectives, in one line each")
st.markdown(
    """
- **Causal LM** (GPT, Llama): predict each next token from the ones before it;
  every position is scored.
- **Masked LM** (BERT): hide about 15 % of the tokens (80 % become `[MASK]`,
  10 % a random token, 10 % stay as they were) and predict the originals;
  only those positions are scored.
- **Next-sentence prediction** (BERT): does sentence B follow sentence A?
  A two-way classification of the pair.
- **BERT's pre-training loss**: masked-LM loss + next-sentence loss.
"""
)
