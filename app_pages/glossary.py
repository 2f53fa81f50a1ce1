import streamlit as st

from lmviz.course.glossary import LESSON_TERMS, TERMS, anchor
from lmviz.course.registry import PATH

st.title("Glossary")
st.markdown("Every word the pages use, defined once. The pages link each word's first use here.")
for term, (_, definition) in TERMS.items():
    st.subheader(term, anchor=anchor(term))
    st.markdown(definition)
    where = [lesson.title for lesson in PATH if term in LESSON_TERMS.get(lesson.url_path, ())]
    if where:  # from the lessons' declared terms, the list tests/course/test_glossary.py checks against each page
        st.caption("Used on: " + ", ".join(where) + ".")
