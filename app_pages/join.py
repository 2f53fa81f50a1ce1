"""The page a student's phone opens from the projector's QR code (join?room=CODE) or with the code typed: the
question the teacher asks, and one answer to it. No name is asked.

It loads no model and imports no torch, so that it opens in a moment on a phone whatever the server is doing:
its imports are Streamlit and the live class's torch-free view (tests/app/test_live_pages.py checks, in a fresh
interpreter)."""

import streamlit as st

from lmviz.app import live

st.title("Join the class")
live.phone_page()
