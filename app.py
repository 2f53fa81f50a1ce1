"""lmviz: see, number by number, how language models' training losses are computed.

Run with:  streamlit run app.py
"""

import contextlib

import streamlit as st

from lmviz.app import live, live_access, url_state
from lmviz.app.chrome import PageStopped, first_drawing, hide_numbers_switch, page_style, presentation_switch
from lmviz.app.garbage import collect_after_run
from lmviz.app.path import land_at_top, lesson_footer, lesson_header
from lmviz.app.warm import warm_start
from lmviz.course.registry import PATH

st.set_page_config(page_title="lmviz — how LM training losses are computed", page_icon="📉", layout="wide")
live_access.take_links()  # a teacher key or secret in a link leaves the address bar before anything is drawn
live.sweep_in_background()  # a forgotten room is closed and its sentences deleted, whether or not one is opened

# The pages live in app_pages/, not pages/: Streamlit treats a folder named pages/ next to the entry
# script as an old-style multipage app until st.navigation has run once, so the very first visit
# after the server starts, if it was a link to a page, showed "Page not found" (streamlit#9992).
home = st.Page("app_pages/home.py", title="Home", icon=":material/home:", default=True)
pages = {lesson.url_path: st.Page(lesson.page, title=lesson.title, icon=lesson.icon, url_path=lesson.url_path)
         for lesson in PATH}
live_class = st.Page("app_pages/live_class.py", title="Live class", icon=":material/co_present:",
                     url_path="live-class")
glossary = st.Page("app_pages/glossary.py", title="Glossary", icon=":material/menu_book:", url_path="glossary")
# The phones' page: reached by the projector's QR code (join?room=CODE), listed in no navigation
join = st.Page("app_pages/join.py", title="Join the class", icon=":material/login:", url_path="join",
               visibility="hidden")
# expanded: with more than twelve pages Streamlit shows ten and folds the rest behind "View N more"; a class sees
# every lesson of the path instead
page = st.navigation([home, *pages.values(), live_class, glossary, join], expanded=True)
if page is join:
    # A phone in class: the join page alone, in a moment: none of the room's switches, and no model warmed
    with contextlib.suppress(PageStopped):
        page.run()
else:
    page_style()
    presentation_switch()
    hide_numbers_switch()
    live.teacher_room()  # a teacher's room stays in every page's link: a reload of a lesson keeps its Ask buttons
    warm_start()  # the causal-LM pages' model loads in the background from the first visit to any page
    land_at_top(page)  # a page switch opens the new page at its top, not at the old page's offset
    url_state.on_page(page.url_path)  # the inputs the page keeps in its link are its own, for its reset button
    lesson = next((lesson for lesson in PATH if pages[lesson.url_path] is page), None)
    if lesson:
        lesson_header(lesson)
    try:
        # a page stopped early on bad input (stop_page) is drawn up to its sentence, and the way on is still shown
        with first_drawing(page.url_path), contextlib.suppress(PageStopped):
            page.run()
    finally:
        if lesson:
            lesson_footer(lesson)
        # in place of Streamlit's collection after every run (.streamlit/config.toml, runner.postScriptGC): a
        # page's run may leave tensors in reference cycles, which should not wait for Python's own collector
        collect_after_run()
