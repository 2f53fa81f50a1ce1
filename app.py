"""lmviz: see, number by number, how language models' training losses are computed.

Run with:  streamlit run app.py
"""

import streamlit as st

from lmviz.classroom import lesson_footer, lesson_header, page_style, presentation_switch, warm_start
from lmviz.lesson import PATH

st.set_page_config(page_title="lmviz — how LM training losses are computed", page_icon="📉", layout="wide")
page_style()
presentation_switch()
warm_start()  # the causal-LM pages' model loads in the background from the first visit to any page

# The pages live in app_pages/, not pages/: Streamlit treats a folder named pages/ next to the entry
# script as an old-style multipage app until st.navigation has run once, so the very first visit
# after the server starts, if it was a link to a page, showed "Page not found" (streamlit#9992).
home = st.Page("app_pages/home.py", title="Home", icon=":material/home:", default=True)
lessons = {step.url_path: st.Page(step.page, title=step.title, icon=step.icon, url_path=step.url_path)
           for step in PATH}
glossary = st.Page("app_pages/glossary.py", title="Glossary", icon=":material/menu_book:", url_path="glossary")
page = st.navigation([home, *lessons.values(), glossary])
step = next((step for step in PATH if lessons[step.url_path] is page), None)
if step:
    lesson_header(step)
try:
    page.run()
finally:  # also after a page stopped early (st.stop) on bad input: the way on is still shown
    if step:
        lesson_footer(step)
