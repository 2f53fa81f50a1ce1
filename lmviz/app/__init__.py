"""The only Streamlit code: page chrome, the lesson path on the page, model choosers, caches, widgets, the
warm start and how a problem is shown. Pages (app_pages/) are built from these and the layers below."""
