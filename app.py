"""lmviz: see, number by number, how language models' training losses are computed.

Run with:  streamlit run app.py
"""

import streamlit as st

from lmviz.classroom import page_style, presentation_switch, warm_start

st.set_page_config(page_title="lmviz — how LM training losses are computed", page_icon="📉", layout="wide")
page_style()
presentation_switch()
warm_start()  # the causal-LM pages' model loads in the background from the first visit to any page

# The pages live in app_pages/, not pages/: Streamlit treats a folder named pages/ next to the entry
# script as an old-style multipage app until st.navigation has run once, so the very first visit
# after the server starts, if it was a link to a page, showed "Page not found" (streamlit#9992).
pages = [
    st.Page("app_pages/home.py", title="Home", icon=":material/home:", default=True),
    st.Page("app_pages/toy_example.py", title="Toy example", icon=":material/calculate:", url_path="toy"),
    st.Page("app_pages/your_sentence.py", title="Your sentence", icon=":material/edit_note:", url_path="sentence"),
    st.Page("app_pages/next_token.py", title="Next token", icon=":material/casino:", url_path="next-token"),
    st.Page("app_pages/chat_loss.py", title="Chat fine-tuning loss", icon=":material/forum:", url_path="chat-loss"),
    st.Page("app_pages/batches.py", title="Batches and padding", icon=":material/view_agenda:", url_path="batches"),
    st.Page("app_pages/masked_lm.py", title="Masked LM", icon=":material/theater_comedy:", url_path="masked-lm"),
    st.Page("app_pages/next_sentence.py", title="Next sentence", icon=":material/compare_arrows:", url_path="nsp"),
    st.Page("app_pages/bert_loss.py", title="BERT pre-training loss", icon=":material/functions:", url_path="bert-loss"),
    st.Page("app_pages/train.py", title="Train", icon=":material/monitoring:", url_path="train"),
    st.Page("app_pages/glossary.py", title="Glossary", icon=":material/menu_book:", url_path="glossary"),
]
st.navigation(pages).run()
