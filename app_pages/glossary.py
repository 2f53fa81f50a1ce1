import streamlit as st

from lmviz.course.glossary import TERMS, anchor

st.title("Glossary")
st.markdown("Every word the pages use, defined once. The pages link each word's first use here.")
for term, (_, definition) in TERMS.items():
    st.subheader(term, anchor=anchor(term))
    st.markdown(definition)
